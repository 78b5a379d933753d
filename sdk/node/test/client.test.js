'use strict';
// dtq's Node Client against a real redis-server (a unix socket in a temporary
// directory) with the Functions installed by dtqctl, and a real dtq-worker running a
// Node pool of fixtures/producer.js: enqueue and result, every way a task ends,
// batches with callbacks, chains handing results forward, error replies.
//
// Needs DTQCTL, DTQ_WORKER (default: build/ of the source tree) and REDIS_SERVER (default:
// redis-server on PATH), and node-redis (ctest sets NODE_PATH=/usr/share/nodejs, Debian's). Skipped when one is missing, unless
// DTQ_TEST_REQUIRE_REDIS=1 (as ctest sets), when that is a failure.
const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const net = require('node:net');
const os = require('node:os');
const path = require('node:path');
const { spawn, execFileSync } = require('node:child_process');
const dtq = require('../index.js');

const ROOT = path.resolve(__dirname, '..', '..', '..');
const DTQCTL = process.env.DTQCTL || path.join(ROOT, 'build', 'dtqctl');
const WORKER = process.env.DTQ_WORKER || path.join(ROOT, 'build', 'dtq-worker');
const REDIS_SERVER = process.env.REDIS_SERVER || 'redis-server';
const REQUIRE = process.env.DTQ_TEST_REQUIRE_REDIS === '1';

function missing() {
  for (const f of [DTQCTL, WORKER]) {
    try { fs.accessSync(f, fs.constants.X_OK); } catch { return `no ${f}`; }
  }
  try { execFileSync(REDIS_SERVER, ['--version'], { stdio: 'ignore' }); } catch { return 'no redis-server'; }
  try { require.resolve('redis'); } catch { return 'no node-redis (apt-get install node-redis; NODE_PATH=/usr/share/nodejs)'; }
  return null;
}

async function until(what, fn, ms = 10000) {
  const end = Date.now() + ms;
  for (;;) {
    if (await fn()) return;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

test('connect fails at once when nothing listens, with the socket\'s error', { skip: (() => {
  try { require.resolve('redis'); return false; } catch { return 'no node-redis'; }
})() }, async () => {
  const start = Date.now();
  await assert.rejects(dtq.Client.connect('redis://127.0.0.1:1/0'), (e) => e.code === 'ECONNREFUSED');
  assert.ok(Date.now() - start < 5000);
});

const why = missing();
if (why && REQUIRE) throw new Error(why);

test('the Node Client against a real daemon', { skip: why || false, timeout: 90000 }, async (t) => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'dtq-nodesdk-'));
  const sock = path.join(dir, 'redis.sock');
  const redis = spawn(REDIS_SERVER, ['--port', '0', '--unixsocket', sock, '--save', '',
    '--appendonly', 'no', '--dir', dir], { stdio: 'ignore' });
  let worker = null;
  let client = null;
  let log = '';
  t.after(async () => {
    if (client) await client.close().catch(() => {});
    if (worker && worker.exitCode === null) {
      const exited = new Promise((resolve) => worker.once('exit', resolve));
      worker.kill('SIGTERM'); // drains, then stops its pool processes
      const timer = setTimeout(() => worker.kill('SIGKILL'), 10000);
      await exited;
      clearTimeout(timer);
    }
    redis.kill('SIGKILL');
    fs.rmSync(dir, { recursive: true, force: true });
  });
  // until it accepts: the socket file exists from bind(), a moment before listen()
  await until('redis-server', () => new Promise((resolve) => {
    const s = net.connect(sock, () => { s.destroy(); resolve(true); });
    s.on('error', () => resolve(false));
  }));
  const url = `unix://${sock}`;
  execFileSync(DTQCTL, ['-u', url, 'functions', 'install'], { stdio: 'pipe' });
  const ini = path.join(dir, 'worker.ini');
  fs.writeFileSync(ini, [
    '[redis]', `url = ${url}`,
    '[worker]', 'queues = node,flow', 'concurrency = 8', 'heartbeat_interval_s = 1',
    '[retry]', 'base_delay = 0.01', 'max_delay = 0.05',
    '[pool:js]', `command = ${process.execPath} ${path.join(__dirname, '..', 'bin', 'dtq-serve.js')} ` +
      path.join(__dirname, '..', 'fixtures', 'producer.js'),
    'processes = 1', 'inflight = 4', '',
  ].join('\n'));
  worker = spawn(WORKER, ['-c', ini], { stdio: ['ignore', 'pipe', 'pipe'] });
  worker.stdout.on('data', (d) => { log += d; });
  worker.stderr.on('data', (d) => { log += d; });
  worker.on('exit', (code, sig) => { log += `\n[dtq-worker exited: ${code ?? sig}]`; });
  // A failing subtest shows what the daemon said.
  t.afterEach((st) => { if (st.passed === false) t.diagnostic(log); });

  client = await dtq.Client.connect(url);

  await t.test('enqueue, then the result', async () => {
    const id = await client.enqueue('node', 'double', { n: 21 }, { maxAttempts: 2, priority: 7 });
    assert.match(id, /^\d+-\d+$/);
    assert.equal(await client.redis.hGet(`dtq:task:${id}`, 'priority'), '7');
    assert.equal(await client.result(id, { timeoutMs: 20000 }), 42, log);
    assert.equal(await client.status(id), 'succeeded');
    assert.equal(await client.status('1-1'), null);
  });

  await t.test('a permanent failure is dead-lettered: TaskDeadLetteredError', async () => {
    const id = await client.enqueue('node', 'boom', null);
    await assert.rejects(client.result(id, { timeoutMs: 20000 }), (e) => {
      assert.ok(e instanceof dtq.TaskDeadLetteredError && e instanceof dtq.TaskError, e);
      assert.equal(e.status, 'dead_lettered');
      assert.match(e.lastError, /PermanentError: no such customer/);
      return true;
    });
  });

  await t.test('a cancelled task and a result that does not come in time', async () => {
    const later = await client.enqueue('node', 'double', { n: 1 }, { delayMs: 60000 });
    await assert.rejects(client.result(later, { timeoutMs: 100 }), dtq.ResultTimeoutError);
    execFileSync(DTQCTL, ['-u', url, 'cancel', later], { stdio: 'pipe' });
    await assert.rejects(client.result(later, { timeoutMs: 5000 }), dtq.TaskCancelledError);
    await assert.rejects(client.result('1-1'), dtq.NotFoundError);
  });

  await t.test('a batch with both callbacks, a member added, then closed', async () => {
    const b = await client.batch('flow', [['double', { n: 1 }], ['boom', {}]],
      { batchId: 'nb1', onComplete: 'bound', onCompletePayload: { book: 7 }, open: true, maxAttempts: 1 });
    assert.equal(b.id, 'nb1');
    assert.equal(b.taskIds.length, 2);
    // own_max_attempts: the producer's value, written at once (max_attempts only when fetched)
    assert.equal(await client.redis.hGet(`dtq:task:${b.taskIds[0]}`, 'own_max_attempts'), '1');
    const [added] = await client.batchAdd('nb1', 'flow', [['double', { n: 2 }]]);
    const joined = await client.enqueue('flow', 'double', { n: 3 }, { batch: 'nb1' });
    assert.equal(await client.result(added, { timeoutMs: 20000 }), 4);
    assert.equal(await client.result(joined, { timeoutMs: 20000 }), 6);
    assert.ok(['closed', 'complete'].includes(await client.batchClose('nb1')));
    let shown;
    await until('the batch to complete', async () => {
      shown = await client.batchShow('nb1');
      return shown.pending === 0 && shown.on_complete && shown.on_complete.task_id;
    }, 20000);
    assert.equal(shown.total, 4);
    assert.equal(shown.succeeded, 3);
    assert.equal(shown.dead_lettered, 1);
    assert.deepEqual(shown.failed_ids, [b.taskIds[1]]);
    const cb = await client.result(shown.on_complete.task_id, { timeoutMs: 20000 });
    assert.equal(cb.seen.book, 7);
    assert.equal(cb.seen.batch.total, 4);
    assert.deepEqual(cb.seen.batch.failed_ids, [b.taskIds[1]]);
    await assert.rejects(client.batchAdd('nb1', 'flow', [['double', { n: 9 }]]), dtq.WrongStateError);
    await assert.rejects(client.batchShow('nosuch'), dtq.NotFoundError);
  });

  await t.test('a chain hands each link the result of the one before', async () => {
    const ids = await client.chain('flow', [['step', 'a'], ['step', 'b'], ['step', 'c']], { maxAttempts: 2 });
    assert.equal(ids.length, 3);
    const last = await client.result(ids[2], { timeoutMs: 20000 });
    assert.deepEqual(last, { got: 'c', before: { got: 'b', before: { got: 'a', before: null } } });
    assert.equal(await client.redis.hGet(`dtq:task:${ids[1]}`, 'after'), ids[0]);
    await assert.rejects(client.chain('flow', [['step', 1]], { idempotencyKey: 'k' }), TypeError);
  });

  await t.test('dependencies and unique jobs', async () => {
    const parent = await client.enqueue('flow', 'slow', null);
    const child = await client.enqueue('flow', 'step', 'kid', { after: [parent], onFailure: 'run' });
    assert.equal(await client.redis.hGet(`dtq:task:${child}`, 'on_failure'), 'run');
    assert.deepEqual(await client.result(child, { timeoutMs: 20000 }), { got: 'kid', before: 'late' });
    const first = await client.enqueue('node', 'double', { n: 5 },
      { delayMs: 60000, uniqueFor: 60, uniqueKey: 'u1', uniqueMode: 'until_started' });
    const again = await client.enqueue('node', 'double', { n: 6 },
      { delayMs: 60000, uniqueFor: 60, uniqueKey: 'u1', uniqueMode: 'until_started' });
    assert.equal(again, first);
  });

  await t.test('error replies become dtq errors', async () => {
    await assert.rejects(client.enqueue('bad queue!', 't', 1), (e) => {
      assert.ok(e instanceof dtq.InvalidArgumentError && e instanceof dtq.DtqError, e);
      assert.equal(e.code, 'INVALID_ARGUMENT');
      assert.match(e.message, /queue name/);
      return true;
    });
    await client.enqueue('q', 't', 1, { taskId: 'dup', delayMs: 60000 });
    await assert.rejects(client.enqueue('q', 't', 1, { taskId: 'dup' }), dtq.IdExistsError);
    await assert.rejects(client.enqueue('q', 't', 1, { priorty: 3 }), /unknown option priorty/);
    await assert.rejects(client.enqueue('q', 't', () => 1), TypeError);
    await assert.rejects(client.enqueue('q', 't', 1, { priority: true }), /priority must be a number or a string/);
    await assert.rejects(client.batch('q', [['t', 1]], { open: 'yes' }), /open must be a boolean/);
    const other = new dtq.Client(client.redis, { namespace: 'other' });
    await assert.rejects(other.enqueue('q', 't', 1), (e) => {
      assert.ok(e instanceof dtq.FunctionsNotLoadedError, e);
      assert.match(e.message, /dtqctl -n other functions install/);
      return true;
    });
  });
});
