'use strict';
/**
 * dtq's Node SDK: serve task types from a long-lived handler process of a
 * `[pool:NAME]` section, speaking the pool protocol, version 1 (sdk/PROTOCOL.md):
 * newline-delimited JSON objects, tasks and cancels in on descriptor 3, hello,
 * answers and progress out on descriptor 4. stdout and stderr stay the program's own.
 *
 * CommonJS, so that `require('dtq')` works everywhere and ESM programs can still
 * `import { task, serve } from 'dtq'`; no dependency.
 *
 * @module dtq
 */

const fs = require('node:fs');
const net = require('node:net');

const VERSION = '0.1.0';
const PROTOCOL = 1;
/** A line is at most 16 MiB (PROTOCOL.md, "The channel"). */
const MAX_LINE = 16 * 1024 * 1024;
const STACK_LINES = 20;
const ERROR_BYTES = 4096;
const PROGRESS_MESSAGE_BYTES = 200;
/** EX_SOFTWARE: the status of a process that met a protocol error. */
const EXIT_PROTOCOL = 70;

/** Codes (`err.code`) worth another attempt: the socket's, and the dtq Client's QUEUE_FULL
 * and IDEMPOTENCY_IN_PROGRESS (retryable in the Python SDK too). */
const RETRYABLE_CODES = new Set([
  'ETIMEDOUT', 'ECONNREFUSED', 'ECONNRESET', 'EPIPE', 'ENOTFOUND', 'EAI_AGAIN',
  'QUEUE_FULL', 'IDEMPOTENCY_IN_PROGRESS',
]);
/** node-redis's connection errors, by class name (they carry no code; serving loads no
 * node-redis), as the Python SDK retries redis-py's ConnectionError and TimeoutError. */
const RETRYABLE_CLASSES = new Set([
  'ClientOfflineError', 'SocketClosedUnexpectedlyError', 'ConnectionTimeoutError',
]);

/**
 * A failure worth another attempt (class `retryable`): the task is retried with
 * the queue's back-off while attempts remain.
 */
class RetryableError extends Error {
  /**
   * @param {string} message
   * @param {{cause?: unknown}} [options]
   */
  constructor(message, options) {
    super(message, options);
    this.name = new.target.name;
  }
}

/**
 * A failure no retry will mend (class `permanent`): the task is dead-lettered.
 */
class PermanentError extends Error {
  /**
   * @param {string} message
   * @param {{cause?: unknown}} [options]
   */
  constructor(message, options) {
    super(message, options);
    this.name = new.target.name;
  }
}

/**
 * A payload the handler refuses: permanent, sent with `class: "invalid_payload"`.
 */
class InvalidPayloadError extends PermanentError {}

/**
 * The handlers registered in this process. Kept on globalThis so that two copies
 * of this module (say `bin/dtq-serve.js`'s and one in the program's node_modules)
 * share one registry.
 * @type {Map<string, Function>}
 */
const registry = globalThis[Symbol.for('dtq.registry')] ||
  (globalThis[Symbol.for('dtq.registry')] = new Map());

/**
 * @typedef {object} Context
 * @property {string} taskId the task's id
 * @property {string} queue the queue it came from
 * @property {string} taskType its type
 * @property {number} attempt this attempt, from 1
 * @property {number} maxAttempts the attempts it has in all
 * @property {Date|null} deadline when this attempt times out (null when none was sent)
 * @property {(fraction?: number, message?: string) => void} progress
 *   reports progress: `fraction` in [0, 1], `message` cut to 200 bytes
 * @property {AbortSignal} signal aborted on a `cancel` from the daemon (reason: an
 *   `AbortError` DOMException) or at the deadline (a `TimeoutError` DOMException)
 */

/**
 * Registers the handler of a task type.
 *
 * @param {string} name the task type
 * @param {(payload: any, ctx: Context) => any} fn called with the task's payload
 *   and a {@link Context}; may be async. What it returns (or resolves to) is the
 *   task's result, a JSON value (`undefined` is `null`). What it throws fails the
 *   task: {@link RetryableError}, timeouts and connection errors retry; anything
 *   else is permanent.
 */
function task(name, fn) {
  if (typeof name !== 'string' || name === '') throw new TypeError('task: name must be a non-empty string');
  if (typeof fn !== 'function') throw new TypeError('task: fn must be a function');
  if (registry.has(name)) throw new Error(`task: ${name} is already registered`);
  registry.set(name, fn);
}

/** @returns {string[]} the registered task types, in registration order */
function types() {
  return [...registry.keys()];
}

/** Whether err (or an error in its cause chain) is a timeout or a connection error. */
function isTransient(err, task) {
  for (let e = err, depth = 0; e != null && typeof e === 'object' && depth < 8; e = e.cause, depth++) {
    if (e instanceof RetryableError) return true;
    if (e instanceof PermanentError) return false;
    if (typeof e.code === 'string' && RETRYABLE_CODES.has(e.code)) return true;
    if (e.constructor && RETRYABLE_CLASSES.has(e.constructor.name)) return true;
    if (e.name === 'TimeoutError') return true;
    if (e.name === 'AbortError' && task && task.timedOut()) return true;
  }
  return false;
}

/**
 * How a thrown value fails a task.
 * @param {unknown} err
 * @param {{timedOut(): boolean}} [task]
 * @returns {{retryable: boolean, class?: string, error: string}}
 */
function classify(err, task) {
  const out = { retryable: isTransient(err, task), error: errorText(err) };
  if (err instanceof InvalidPayloadError) out.class = 'invalid_payload';
  return out;
}

/** Cuts s to at most max UTF-8 bytes without splitting a character. */
function cutBytes(s, max) {
  if (Buffer.byteLength(s) <= max) return s;
  const b = Buffer.from(s).subarray(0, max);
  let end = b.length;
  // Back off over a partial character: continuation bytes are 10xxxxxx.
  let i = end - 1;
  while (i >= 0 && (b[i] & 0xc0) === 0x80) i--;
  if (i >= 0) {
    const lead = b[i];
    const need = lead >= 0xf0 ? 4 : lead >= 0xe0 ? 3 : lead >= 0xc0 ? 2 : 1;
    if (end - i < need) end = i;
  }
  return b.subarray(0, end).toString();
}

/**
 * The `error` text of a failure: "Name: message", then the stack's innermost
 * frames (at most 20 lines; V8 lists them first, where Python's traceback ends),
 * all in at most 4 KiB.
 * @param {unknown} err
 * @returns {string}
 */
function errorText(err) {
  let head;
  let frames = [];
  if (err instanceof Error || (err && typeof err === 'object' && typeof err.message === 'string')) {
    const name = err.name || (err.constructor && err.constructor.name) || 'Error';
    head = `${name}: ${err.message}`;
    if (typeof err.stack === 'string') {
      // The innermost frames (V8 lists them first), without this module's own.
      frames = err.stack.split('\n').filter((l) => /^\s+at /.test(l) && !l.includes(__filename));
    }
  } else if (typeof err === 'string') {
    head = `Error: ${err}`;
  } else {
    let s;
    try { s = JSON.stringify(err); } catch { s = undefined; }
    head = `Error: thrown value ${s === undefined ? String(err) : s}`;
  }
  let text = cutBytes(head, ERROR_BYTES);
  for (const frame of frames.slice(0, STACK_LINES)) {
    if (Buffer.byteLength(text) + 1 + Buffer.byteLength(frame) > ERROR_BYTES) break;
    text += '\n' + frame;
  }
  return text;
}

/** Writes a message on stderr and exits with status 70 (EX_SOFTWARE). */
function protocolError(message) {
  process.stderr.write(`dtq: protocol error: ${message}\n`);
  process.exit(EXIT_PROTOCOL);
}

/**
 * A stream on an inherited descriptor: a net.Socket for a pipe or a socket (no
 * thread of libuv's pool held by a blocking read or write), an fs stream otherwise.
 */
function openFd(fd, readable) {
  try {
    return new net.Socket({ fd, readable, writable: !readable, allowHalfOpen: true });
  } catch (e) {
    if (e && e.code !== 'ERR_INVALID_FD_TYPE') throw e;
    return readable ? fs.createReadStream(null, { fd, autoClose: false })
      : fs.createWriteStream(null, { fd, autoClose: false });
  }
}

function envInt(name, dflt) {
  const v = process.env[name];
  if (v === undefined || v === '') return dflt;
  const n = Number(v);
  if (!Number.isInteger(n) || n < 0) {
    process.stderr.write(`dtq: ${name}=${v} is not a whole number; using ${dflt}\n`);
    return dflt;
  }
  return n;
}

/**
 * A task's context, the handler's second argument (see the Context typedef): frozen;
 * `signal` is made on first use.
 */
class Context {
  #task;

  constructor(task) {
    const msg = task.msg;
    this.#task = task;
    this.taskId = task.id;
    this.queue = msg.queue;
    this.taskType = msg.type;
    this.attempt = msg.attempt;
    this.maxAttempts = msg.max_attempts;
    this.deadline = task.deadline === null ? null : new Date(task.deadline);
    this.parentResults = msg.parent_results && typeof msg.parent_results === 'object'
      ? msg.parent_results : {};
    /**
     * Reports progress: `fraction` in [0, 1] (clamped), `message` cut to 200 bytes. An
     * own property, so that `const { progress } = ctx` works.
     * @type {(fraction?: number, message?: string) => void}
     */
    this.progress = (fraction, message) => task.progress(fraction, message);
    Object.freeze(this);
  }

  /** @returns {AbortSignal} aborted on a cancel from the daemon or at the deadline */
  get signal() {
    return this.#task.signal();
  }

}

let serving = false;

/**
 * Serves the registered task types until descriptor 3 ends: writes hello, runs
 * each task it is sent (at most `inflight` at once), answers it, and exits 0 once
 * every task is answered. Exits 70 on a protocol error. Never resolves.
 *
 * @param {{inflight?: number, tasksFd?: number, repliesFd?: number}} [options]
 *   defaults: DTQ_INFLIGHT (else 1), DTQ_TASKS_FD (else 3), DTQ_REPLIES_FD (else 4)
 * @returns {Promise<never>}
 */
function serve(options = {}) {
  if (serving) throw new Error('serve: already serving');
  serving = true;
  const inflight = Math.max(1, options.inflight || envInt('DTQ_INFLIGHT', 1) || 1);
  const input = openFd(options.tasksFd ?? envInt('DTQ_TASKS_FD', 3), true);
  const output = openFd(options.repliesFd ?? envInt('DTQ_REPLIES_FD', 4), false);

  /** @type {Map<string, Task>} the tasks held: sent, not yet answered */
  const held = new Map();
  /** @type {Task[]} held tasks waiting for a free slot */
  const waiting = [];
  let running = 0;
  let ended = false;
  // While the output is full, progress is coalesced (the latest per task) and
  // reading stops; answers are always queued.
  let full = false;
  const pendingProgress = new Map();

  output.on('error', (e) => {
    process.stderr.write(`dtq: cannot write to the replies descriptor: ${e.message}\n`);
    process.exit(EXIT_PROTOCOL);
  });
  output.on('drain', () => {
    full = false;
    for (const [id, line] of pendingProgress) {
      pendingProgress.delete(id);
      if (held.has(id)) write(line);
      if (full) return;
    }
    if (!ended) input.resume();
  });

  function write(line) {
    if (!output.write(line)) {
      full = true;
      input.pause();
    }
  }

  function send(msg) {
    write(JSON.stringify(msg) + '\n');
  }

  class Task {
    constructor(msg) {
      this.msg = msg;
      this.id = msg.id;
      this.controller = null; // made when the handler first asks for ctx.signal
      this.cancelReason = null;
      this.timer = null;
      this.deadline = Number.isFinite(msg.deadline_ms) ? msg.deadline_ms : null;
    }

    timedOut() {
      return this.cancelReason === 'timeout' ||
        (this.deadline !== null && Date.now() >= this.deadline);
    }

    /**
     * The task's AbortSignal. Made on first use, with the deadline's timer: most
     * handlers never look, and a controller and a timer per task were a measurable
     * part of a no-op task's cost.
     */
    signal() {
      if (this.controller === null) {
        this.controller = new AbortController();
        if (this.cancelReason !== null) {
          this.controller.abort(this.cancelError());
        } else if (this.deadline !== null && held.get(this.id) === this) {
          const ms = Math.max(0, this.deadline - Date.now());
          if (ms < 2 ** 31) { // setTimeout's limit; a later deadline needs no timer
            this.timer = setTimeout(() => this.controller.abort(
              new DOMException('the task reached its deadline', 'TimeoutError')), ms);
            this.timer.unref();
          }
        }
      }
      return this.controller.signal;
    }

    cancelError() {
      return new DOMException(`the task was cancelled (${this.cancelReason})`, 'AbortError');
    }

    progress(fraction, message) {
      if (!held.has(this.id)) return; // answered: nothing more for this id
      const m = { t: 'progress', id: this.id };
      if (typeof fraction === 'number' && Number.isFinite(fraction)) {
        m.fraction = Math.min(1, Math.max(0, fraction));
      }
      if (message !== undefined && message !== null) {
        m.message = cutBytes(String(message), PROGRESS_MESSAGE_BYTES);
      }
      const line = JSON.stringify(m) + '\n';
      if (full) pendingProgress.set(this.id, line);
      else write(line);
    }

    async run() {
      running++;
      let answer;
      try {
        // settle asynchronously always: a handler that returns or throws at once must not
        // start the next waiting task inside this one's stack
        await undefined;
        const fn = registry.get(this.msg.type);
        if (!fn) {
          const serves = types();
          throw new PermanentError(`no handler for task type ${JSON.stringify(this.msg.type)} ` +
            `(this process serves ${serves.length ? serves.join(', ') : 'none'})`);
        }
        const payload = this.msg.payload === undefined ? null : this.msg.payload;
        const result = await fn(payload, new Context(this));
        answer = okLine(this.id, result);
      } catch (err) {
        answer = JSON.stringify({ t: 'fail', id: this.id, ...classify(err, this) }) + '\n';
      }
      if (this.timer !== null) clearTimeout(this.timer);
      held.delete(this.id);
      pendingProgress.delete(this.id);
      write(answer);
      running--;
      next();
    }

    cancel(reason) {
      this.cancelReason = typeof reason === 'string' ? reason : 'cancelled';
      if (this.controller !== null) this.controller.abort(this.cancelError());
    }
  }

  /** The ok line of a result, encoded once; or the fail line of one that cannot be. */
  function okLine(id, result) {
    let text;
    let why = null;
    try {
      text = result === undefined ? 'null' : JSON.stringify(result);
      if (text === undefined) why = new TypeError(`the result is not JSON-serialisable: a ${typeof result}`);
    } catch (e) {
      why = new TypeError(`the result is not JSON-serialisable: ${e && e.message}`);
    }
    // the answer's line stays within 16 MiB (a string's UTF-8 bytes are at most three
    // times its length: they are counted only when they could be over)
    if (why === null && text.length > (MAX_LINE - 1024) / 3 && Buffer.byteLength(text) > MAX_LINE - 1024) {
      why = new RangeError(`the result is ${Buffer.byteLength(text)} bytes, over the protocol's 16 MiB line`);
    }
    if (why !== null) return JSON.stringify({ t: 'fail', id, retryable: false, error: errorText(why) }) + '\n';
    return `{"t":"ok","id":${JSON.stringify(id)},"result":${text}}\n`;
  }

  function next() {
    while (running < inflight && waiting.length > 0) waiting.shift().run();
    if (ended && held.size === 0) finish();
  }

  let finishing = false;
  function finish() {
    if (finishing) return;
    finishing = true;
    output.end(() => process.exit(0));
  }

  function onLine(buf) {
    let msg;
    try {
      msg = JSON.parse(buf.toString('utf8'));
    } catch (e) {
      protocolError(`a line is not JSON (${e.message}): ${cutBytes(buf.toString('utf8'), 200)}`);
    }
    if (msg === null || typeof msg !== 'object' || Array.isArray(msg)) {
      protocolError(`a line is not a JSON object: ${cutBytes(buf.toString('utf8'), 200)}`);
    }
    if (msg.t === 'task') {
      if (typeof msg.id !== 'string' || msg.id === '') protocolError('a task without an id');
      if (typeof msg.type !== 'string') protocolError(`task ${msg.id} without a type`);
      if (held.has(msg.id)) protocolError(`task ${msg.id} sent while it is held`);
      const t = new Task(msg);
      held.set(t.id, t);
      waiting.push(t);
      next();
    } else if (msg.t === 'cancel') {
      // The task may have been answered already: a cancel of an id not held is no error.
      const t = held.get(msg.id);
      if (t) {
        const i = waiting.indexOf(t);
        if (i >= 0) waiting.splice(i, 1);
        t.cancel(msg.reason);
        if (i >= 0) { // never started: answered at once, its handler not run
          held.delete(t.id);
          send({ t: 'fail', id: t.id, ...classify(t.cancelError(), t) });
          next();
        }
      }
    }
    // Other types: ignored (a newer daemon may send more).
  }

  // Line splitting on bytes, so that a character split across reads is decoded whole.
  let parts = [];
  let partLen = 0;
  input.on('data', (chunk) => {
    let start = 0;
    for (;;) {
      const nl = chunk.indexOf(10, start);
      if (nl < 0) break;
      const piece = chunk.subarray(start, nl);
      let line;
      if (partLen > 0) {
        parts.push(piece);
        line = Buffer.concat(parts, partLen + piece.length);
        parts = [];
        partLen = 0;
      } else {
        line = piece;
      }
      if (line.length > MAX_LINE) protocolError(`a line of ${line.length} bytes, over 16 MiB`);
      onLine(line);
      start = nl + 1;
    }
    if (start < chunk.length) {
      const rest = chunk.subarray(start);
      parts.push(Buffer.from(rest)); // a copy: the chunk may be reused
      partLen += rest.length;
      if (partLen > MAX_LINE) protocolError(`a line over 16 MiB`);
    }
  });
  input.on('end', () => {
    if (partLen > 0) protocolError('the tasks descriptor ended inside a line');
    ended = true;
    next();
  });
  input.on('error', (e) => {
    process.stderr.write(`dtq: cannot read the tasks descriptor: ${e.message}\n`);
    process.exit(EXIT_PROTOCOL);
  });

  send({ t: 'hello', protocol: PROTOCOL, types: types(), inflight, sdk: `node dtq ${VERSION}` });
  return new Promise(() => {});
}

module.exports = {
  ...require('./client.js'),
  task,
  serve,
  types,
  classify,
  errorText,
  RetryableError,
  PermanentError,
  InvalidPayloadError,
  VERSION,
  PROTOCOL,
};
