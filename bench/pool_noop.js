'use strict';
// The Node no-op of bench/pool.sh and of the peer sitting (docs/BENCHMARKS.md, "Handler
// pools"): `command = /usr/bin/node <repo>/sdk/node/bin/dtq-serve.js <repo>/bench/pool_noop.js`.
// It requires the SDK by path, so it needs no install.
const { task } = require('../sdk/node');

task('noop', async () => null);
