'use strict';
// The Node SDK against a stand-in for the daemon's side (test/daemon.js), real processes.
const { test } = require('node:test');
const assert = require('node:assert/strict');
const { spawn } = require('node:child_process');
const path = require('node:path');
const { Daemon } = require('../fixtures/daemon');

const ALL = ['echo', 'nothing', 'sleep', 'noisy', 'retryable', 'permanent', 'invalid', 'type_error',
  'econnrefused', 'fetch_failed', 'timeout', 'throw_string', 'bigint', 'cycle', 'deep',
  'progress', 'wait_cancel', 'until_deadline', 'flood'];

async function withDaemon(t, modules, env, fn) {
  const d = new Daemon(modules, env);
  t.after(() => d.kill());
  return fn(d);
}

test('hello announces the registered types, protocol 1 and inflight', (t) =>
  withDaemon(t, ['handlers.js'], { DTQ_INFLIGHT: '3' }, async (d) => {
    const h = await d.hello();
    assert.equal(h.protocol, 1);
    assert.deepEqual(h.types, ALL);
    assert.equal(h.inflight, 3);
    assert.match(h.sdk, /^node dtq 0\.1\.0/);
    d.end();
    assert.deepEqual(await d.exited, { code: 0, signal: null });
    assert.equal(d.messages.length, 0);
  }));

test('inflight defaults to 1; two modules (CommonJS and ESM) announce the types of both', (t) =>
  withDaemon(t, ['handlers.js', 'more.mjs'], { DTQ_INFLIGHT: '' }, async (d) => {
    const h = await d.hello();
    assert.equal(h.inflight, 1);
    assert.deepEqual(h.types, [...ALL, 'esm_add']);
    const a = await d.run('esm_add', { a: 2, b: 3 });
    assert.deepEqual(a, { t: 'ok', id: a.id, result: 5 });
  }));

test('ok: the result and the context; undefined is null; unknown fields and types ignored', (t) =>
  withDaemon(t, ['handlers.js'], {}, async (d) => {
    await d.hello();
    const deadline = Date.now() + 12345;
    d.send({ t: 'from_the_future', id: 'x' });
    d.task('1796083621041-17', 'echo', { to: 'a@example.com', n: [1, 'é\n'] },
      { queue: 'mail', attempt: 2, max_attempts: 7, deadline_ms: deadline, future_field: 1 });
    assert.deepEqual(await d.answer('1796083621041-17'), { t: 'ok', id: '1796083621041-17', result: {
      payload: { to: 'a@example.com', n: [1, 'é\n'] },
      ctx: { taskId: '1796083621041-17', queue: 'mail', taskType: 'echo', attempt: 2, maxAttempts: 7, deadline },
    } });
    const n = await d.run('nothing');
    assert.deepEqual(n, { t: 'ok', id: n.id, result: null });
  }));

test('serve() from a program that registers its own tasks', async (t) => {
  const child = spawn(process.execPath, [path.join(__dirname, '..', 'fixtures', 'program.js')],
    { stdio: ['ignore', 'pipe', 'pipe', 'pipe', 'pipe'] });
  t.after(() => { if (child.exitCode === null) child.kill('SIGKILL'); });
  let out = '';
  child.stdio[4].on('data', (d) => { out += d; });
  const exited = new Promise((r) => child.on('exit', r));
  child.stdio[3].end('{"t":"task","id":"a","type":"double","queue":"q","attempt":1,"max_attempts":1,"deadline_ms":null,"payload":21}\n');
  assert.equal(await exited, 0);
  const lines = out.trim().split('\n').map((l) => JSON.parse(l));
  assert.deepEqual(lines[0].types, ['double']);
  assert.deepEqual(lines[1], { t: 'ok', id: 'a', result: 42 });
});

function firstLine(error) { return error.split('\n')[0]; }

test('errors: each class, retryable or not, with its error text', (t) =>
  withDaemon(t, ['handlers.js'], { DTQ_INFLIGHT: '4' }, async (d) => {
    await d.hello();
    const cases = [
      ['retryable', true, 'RetryableError: mail server refused'],
      ['permanent', false, 'PermanentError: no such user'],
      ['invalid', false, 'InvalidPayloadError: to: field required'],
      ['type_error', false, "TypeError: Cannot read properties of undefined (reading 'field')"],
      ['econnrefused', true, 'Error: connect ECONNREFUSED 127.0.0.1:1'],
      ['fetch_failed', true, 'TypeError: fetch failed'],
      ['timeout', true, 'TimeoutError: the operation timed out'],
      ['throw_string', false, 'Error: just a string'],
      ['bigint', false, 'TypeError: the result is not JSON-serialisable: Do not know how to serialize a BigInt'],
      ['cycle', false, 'TypeError: the result is not JSON-serialisable: Converting circular structure to JSON'],
    ];
    const answers = await Promise.all(cases.map(([type]) => d.run(type, {})));
    cases.forEach(([type, retryable, first], i) => {
      const a = answers[i];
      assert.equal(a.t, 'fail', type);
      assert.equal(a.retryable, retryable, type);
      assert.ok(a.error.startsWith(first), `${type}: ${a.error}`);
      assert.equal(a.class, type === 'invalid' ? 'invalid_payload' : undefined, type);
    });
    // The stack names the handler's own file.
    assert.match(answers[0].error, /\n {4}at .*fixtures\/handlers\.js:\d+:\d+/);
    // A deep stack is bounded: at most 20 frames, 4 KiB.
    const deep = await d.run('deep');
    assert.equal(firstLine(deep.error), 'Error: deep down');
    const lines = deep.error.split('\n');
    assert.ok(lines.length > 1 && lines.length <= 21, deep.error);
    assert.ok(Buffer.byteLength(deep.error) <= 4096);
  }));

test('an unknown task type fails permanently, naming the types served', (t) =>
  withDaemon(t, ['handlers.js'], {}, async (d) => {
    await d.hello();
    const a = await d.run('no_such_type');
    assert.equal(a.t, 'fail');
    assert.equal(a.retryable, false);
    assert.match(firstLine(a.error), /^PermanentError: no handler for task type "no_such_type" \(this process serves echo, /);
  }));

test('async handlers run concurrently up to inflight', (t) =>
  withDaemon(t, ['handlers.js'], { DTQ_INFLIGHT: '8' }, async (d) => {
    await d.hello();
    const start = Date.now();
    const answers = await Promise.all(Array.from({ length: 8 }, () => d.run('sleep', { ms: 500 })));
    const took = Date.now() - start;
    for (const a of answers) assert.deepEqual(a.result, { slept: 500 });
    assert.ok(took < 2500, `8 tasks of 500 ms took ${took} ms`); // serially: 4000 ms
  }));

test('inflight 2: no more than 2 run at once, the rest wait their turn', (t) =>
  withDaemon(t, ['handlers.js'], { DTQ_INFLIGHT: '2' }, async (d) => {
    await d.hello();
    const start = Date.now();
    await Promise.all(Array.from({ length: 4 }, () => d.run('sleep', { ms: 300 })));
    const took = Date.now() - start;
    assert.ok(took >= 580, `4 tasks of 300 ms two at a time took ${took} ms`);
  }));

test('console.log and console.error do not disturb the protocol', (t) =>
  withDaemon(t, ['handlers.js'], {}, async (d) => {
    await d.hello();
    const a = await d.run('noisy');
    assert.deepEqual(a, { t: 'ok', id: a.id, result: 'quiet' });
    d.end();
    assert.equal((await d.exited).code, 0);
    assert.match(d.stdout, /"id":"forged"/);
    assert.match(d.stderr, /a line on stderr/);
    assert.equal(d.messages.length, 0); // nothing forged reached descriptor 4
  }));

test('progress: fraction clamped to [0, 1], message cut to 200 bytes, before the answer', (t) =>
  withDaemon(t, ['handlers.js'], {}, async (d) => {
    await d.hello();
    d.task('p', 'progress');
    const a = await d.answer('p');
    assert.equal(a.result, 'done');
    const p1 = await d.take((m) => m.t === 'progress');
    const p2 = await d.take((m) => m.t === 'progress');
    const p3 = await d.take((m) => m.t === 'progress');
    assert.deepEqual(p1, { t: 'progress', id: 'p', fraction: 0.5, message: 'half' });
    assert.deepEqual(p2, { t: 'progress', id: 'p', fraction: 1, message: 'x'.repeat(200) });
    assert.deepEqual(p3, { t: 'progress', id: 'p', message: 'message only' });
  }));

test('cancel aborts ctx.signal; a cancel of an id not held is no error', (t) =>
  withDaemon(t, ['handlers.js'], { DTQ_INFLIGHT: '2' }, async (d) => {
    await d.hello();
    d.send({ t: 'cancel', id: 'never-sent', reason: 'cancelled' });
    d.task('c1', 'wait_cancel');
    d.task('c2', 'wait_cancel');
    await new Promise((r) => setTimeout(r, 200));
    d.send({ t: 'cancel', id: 'c1', reason: 'cancelled' });
    const a1 = await d.answer('c1');
    assert.equal(a1.t, 'fail');
    assert.equal(a1.retryable, false); // an admin's cancel: the answer is ignored anyway
    assert.match(a1.error, /^AbortError: the task was cancelled \(cancelled\)/);
    d.send({ t: 'cancel', id: 'c2', reason: 'timeout' });
    const a2 = await d.answer('c2');
    assert.equal(a2.retryable, true); // a timeout retries
    assert.match(a2.error, /^AbortError: the task was cancelled \(timeout\)/);
    d.send({ t: 'cancel', id: 'c1', reason: 'cancelled' }); // answered already: no error
    assert.equal((await d.run('nothing')).t, 'ok');
  }));

test('the deadline aborts ctx.signal with a TimeoutError, which retries', (t) =>
  withDaemon(t, ['handlers.js'], {}, async (d) => {
    await d.hello();
    const a = await d.run('until_deadline', null, { deadline_ms: Date.now() + 300 });
    assert.equal(a.retryable, true);
    assert.match(a.error, /^TimeoutError: the task reached its deadline/);
  }));

test('end of file on descriptor 3: in-flight tasks are answered, then exit 0', (t) =>
  withDaemon(t, ['handlers.js'], { DTQ_INFLIGHT: '3' }, async (d) => {
    await d.hello();
    d.task('e1', 'sleep', { ms: 400 });
    d.task('e2', 'sleep', { ms: 200 });
    d.task('e3', 'sleep', { ms: 300 });
    d.end();
    const { code } = await d.exited;
    assert.equal(code, 0);
    const ids = d.messages.map((m) => m.msg.id).sort();
    assert.deepEqual(ids, ['e1', 'e2', 'e3']);
    for (const m of d.messages) assert.equal(m.msg.t, 'ok');
  }));

for (const [what, line] of [
  ['not JSON', 'this is not json\n'],
  ['a JSON array', '[1,2]\n'],
  ['a JSON string', '"task"\n'],
  ['an empty line', '\n'],
  ['a task without an id', '{"t":"task","type":"echo"}\n'],
]) {
  test(`a protocol error (${what}): a message on stderr, exit 70`, (t) =>
    withDaemon(t, ['handlers.js'], {}, async (d) => {
      await d.hello();
      d.raw(line);
      const { code } = await d.exited;
      assert.equal(code, 70);
      assert.match(d.stderr, /dtq: protocol error: /);
    }));
}

test('a task id sent while it is held is a protocol error', (t) =>
  withDaemon(t, ['handlers.js'], {}, async (d) => {
    await d.hello();
    d.task('dup', 'sleep', { ms: 1000 });
    d.task('dup', 'sleep', { ms: 1000 });
    assert.equal((await d.exited).code, 70);
    assert.match(d.stderr, /task dup sent while it is held/);
  }));

test('lines split across writes, several in one write', (t) =>
  withDaemon(t, ['handlers.js'], { DTQ_INFLIGHT: '2' }, async (d) => {
    await d.hello();
    const one = JSON.stringify({ t: 'task', id: 's1', type: 'echo', payload: 'ü€😀' });
    const two = JSON.stringify({ t: 'task', id: 's2', type: 'echo', payload: 2 });
    const bytes = Buffer.from(one + '\n' + two + '\n');
    const cut = Buffer.from(one).indexOf(Buffer.from('😀')) + 2; // inside the emoji's bytes
    d.child.stdio[3].write(bytes.subarray(0, cut));
    await new Promise((r) => setTimeout(r, 100));
    d.child.stdio[3].write(bytes.subarray(cut));
    assert.equal((await d.answer('s1')).result.payload, 'ü€😀');
    assert.equal((await d.answer('s2')).result.payload, 2);
  }));

test('a cancel of a task still waiting for a slot answers it at once, its handler not run', (t) =>
  withDaemon(t, ['handlers.js'], { DTQ_INFLIGHT: '1' }, async (d) => {
    await d.hello();
    d.task('busy', 'sleep', { ms: 800 });
    d.task('queued', 'echo', 1);
    d.send({ t: 'cancel', id: 'queued', reason: 'shutdown' });
    const a = await d.answer('queued');
    assert.equal(a.t, 'fail');
    assert.match(a.error, /^AbortError: the task was cancelled \(shutdown\)/);
    assert.ok(!d.messages.some((m) => m.msg.id === 'busy')); // answered before the running one
    assert.equal((await d.answer('busy')).t, 'ok');
  }));
