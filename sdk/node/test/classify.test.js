'use strict';
// The SDK's rules for failures, in process (no serve()).
const { test } = require('node:test');
const assert = require('node:assert/strict');
const { classify, errorText, task, types, RetryableError, PermanentError, InvalidPayloadError } = require('..');

test('classify: what retries and what does not', () => {
  const coded = (code) => Object.assign(new Error(code), { code });
  for (const code of ['ETIMEDOUT', 'ECONNREFUSED', 'ECONNRESET', 'EPIPE', 'ENOTFOUND', 'EAI_AGAIN']) {
    assert.equal(classify(coded(code)).retryable, true, code);
  }
  assert.equal(classify(coded('ENOENT')).retryable, false);
  // a follow-up enqueue refused for now, or node-redis offline: retried, as in Python
  const { QueueFullError, IdempotencyInProgressError, InvalidArgumentError } = require('../client.js');
  assert.equal(classify(new QueueFullError('QUEUE_FULL q', 'QUEUE_FULL')).retryable, true);
  assert.equal(classify(new IdempotencyInProgressError('IDEMPOTENCY_IN_PROGRESS 1-1',
    'IDEMPOTENCY_IN_PROGRESS')).retryable, true);
  assert.equal(classify(new InvalidArgumentError('INVALID_ARGUMENT x', 'INVALID_ARGUMENT')).retryable, false);
  class ClientOfflineError extends Error {}
  assert.equal(classify(new ClientOfflineError('The client is offline')).retryable, true);
  assert.equal(classify(new RetryableError('x')).retryable, true);
  assert.equal(classify(new PermanentError('x', { cause: coded('ECONNRESET') })).retryable, false);
  assert.equal(classify(new Error('wrapped', { cause: coded('ECONNRESET') })).retryable, true);
  assert.equal(classify(new DOMException('t', 'TimeoutError')).retryable, true);
  // An AbortError retries when it comes from the deadline, not otherwise.
  const abort = new DOMException('a', 'AbortError');
  assert.equal(classify(abort).retryable, false);
  assert.equal(classify(abort, { timedOut: () => true }).retryable, true);
  assert.equal(classify(new InvalidPayloadError('x')).class, 'invalid_payload');
  assert.equal(classify(new PermanentError('x')).class, undefined);
  assert.equal(classify(null).retryable, false);
  class MailDown extends RetryableError {}
  assert.equal(classify(new MailDown('m')).retryable, true);
  assert.match(errorText(new MailDown('m')), /^MailDown: m\n {4}at /);
});

test('errorText: "Name: message", the innermost frames, at most 20 lines and 4 KiB', () => {
  assert.equal(errorText('plain'), 'Error: plain');
  assert.equal(errorText({ code: 1 }), 'Error: thrown value {"code":1}');
  assert.equal(errorText(undefined), 'Error: thrown value undefined');
  const saved = Error.stackTraceLimit;
  Error.stackTraceLimit = 100;
  try {
    const f = (n) => { if (n) return f(n - 1); throw new Error('deep'); };
    let e;
    try { f(60); } catch (x) { e = x; }
    const lines = errorText(e).split('\n');
    assert.equal(lines[0], 'Error: deep');
    assert.equal(lines.length, 21);
    assert.match(lines[1], /classify\.test\.js/); // the innermost frame: where it was thrown
  } finally {
    Error.stackTraceLimit = saved;
  }
  const big = errorText(new Error('é'.repeat(5000)));
  assert.ok(Buffer.byteLength(big) <= 4096);
  assert.ok(!big.includes('\uFFFD')); // not cut inside a character
});

test('task(): types in order; a name registered twice is refused', () => {
  task('unit_a', () => 1);
  task('unit_b', async () => 2);
  assert.deepEqual(types().slice(-2), ['unit_a', 'unit_b']);
  assert.throws(() => task('unit_a', () => 1), /already registered/);
  assert.throws(() => task('', () => 1), TypeError);
  assert.throws(() => task('unit_c', 'nope'), TypeError);
});
