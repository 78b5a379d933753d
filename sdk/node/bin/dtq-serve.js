#!/usr/bin/env node
'use strict';
/**
 * dtq-serve MODULE...: loads each module (a path, or a package name resolved from
 * the current directory; CommonJS or ESM), which registers its handlers with
 * `task()`, then serves them on descriptors 3 and 4 (sdk/PROTOCOL.md).
 */
const fs = require('node:fs');
const path = require('node:path');
const { pathToFileURL } = require('node:url');
const dtq = require('..');

async function load(spec) {
  let file;
  // A path (relative to the current directory) first, else a package name.
  if (spec.startsWith('.') || path.isAbsolute(spec) || fs.existsSync(spec)) file = path.resolve(spec);
  else file = require.resolve(spec, { paths: [process.cwd()] });
  try {
    require(file);
  } catch (e) {
    if (e && e.code === 'ERR_REQUIRE_ESM') await import(pathToFileURL(file).href);
    else throw e;
  }
}

async function main(argv) {
  if (argv.length === 0 || argv[0] === '-h' || argv[0] === '--help') {
    process.stderr.write('usage: dtq-serve MODULE...\n' +
      'Loads the modules (which register handlers with require("dtq").task) and serves\n' +
      'their task types on descriptors 3 and 4 (the dtq pool protocol, version 1).\n');
    process.exit(argv.length === 0 ? 64 : 0);
  }
  for (const spec of argv) await load(spec);
  await dtq.serve();
}

main(process.argv.slice(2)).catch((e) => {
  process.stderr.write(`dtq-serve: ${e && e.stack ? e.stack : e}\n`);
  process.exit(1);
});
