'use strict';
/**
 * The producer's side of the Node SDK: a {@link Client} enqueues tasks, batches and
 * chains through the dtq Functions (`FCALL <ns>_enqueue ...`, reference sections 4.1,
 * 4.4-4.7) and waits for results. Needs node-redis 4 (Debian: `node-redis`; npm:
 * `redis`), loaded when a Client connects, so that serving needs no dependency.
 *
 * @module dtq/client
 */

/** The Functions' error words (reference section 5.2) and their classes. */
class DtqError extends Error {
  /**
   * @param {string} message the whole error reply
   * @param {string} code its first word
   * @param {string} [detail] the rest
   */
  constructor(message, code, detail = '') {
    super(message);
    this.name = new.target.name;
    this.code = code;
    this.detail = detail;
  }
}
class InvalidArgumentError extends DtqError {}
class NotFoundError extends DtqError {}
class WrongStateError extends DtqError {}
class NotEmptyError extends DtqError {}
class PayloadTooLargeError extends DtqError {}
/** The queue is at max_queue_depth: worth another try later (a handler that throws it is retried). */
class QueueFullError extends DtqError {}
/** A task with that idempotency key is being made right now: try again (retried, thrown by a handler). */
class IdempotencyInProgressError extends DtqError {}
class IdExistsError extends DtqError {}
/** The namespace's Functions are not in this Redis (`dtqctl functions install`). */
class FunctionsNotLoadedError extends DtqError {}

const CODES = new Map([
  ['INVALID_ARGUMENT', InvalidArgumentError],
  ['NOT_FOUND', NotFoundError],
  ['WRONG_STATE', WrongStateError],
  ['NOT_EMPTY', NotEmptyError],
  ['PAYLOAD_TOO_LARGE', PayloadTooLargeError],
  ['QUEUE_FULL', QueueFullError],
  ['IDEMPOTENCY_IN_PROGRESS', IdempotencyInProgressError],
  ['ID_EXISTS', IdExistsError],
]);

/** A task that ended otherwise than succeeded, as {@link Client#result} finds it. */
class TaskError extends Error {
  constructor(taskId, status, lastError, lastErrorClass) {
    let text = `task ${taskId} ${status.replace('_', ' ')}`;
    if (lastError) text += `: ${lastError}`;
    if (lastErrorClass) text += ` (class ${lastErrorClass})`;
    super(text);
    this.name = new.target.name;
    this.taskId = taskId;
    this.status = status;
    this.lastError = lastError;
    this.lastErrorClass = lastErrorClass;
  }
}
class TaskFailedError extends TaskError {}
class TaskDeadLetteredError extends TaskError {}
class TaskCancelledError extends TaskError {}
class TaskExpiredError extends TaskError {}

/** The result was cut to the daemons' result_max_bytes: `text` is what was kept. */
class ResultTruncatedError extends Error {
  constructor(taskId, text) {
    super(`the result of task ${taskId} was truncated to result_max_bytes`);
    this.name = 'ResultTruncatedError';
    this.taskId = taskId;
    this.text = text;
  }
}

/** {@link Client#result}'s timeout passed before the task ended. */
class ResultTimeoutError extends Error {
  constructor(taskId, status, timeoutMs) {
    super(`task ${taskId} did not end within ${timeoutMs} ms (status ${status})`);
    this.name = 'ResultTimeoutError';
    this.taskId = taskId;
    this.status = status;
  }
}

const TERMINAL = new Map([
  ['succeeded', null],
  ['failed', TaskFailedError],
  ['dead_lettered', TaskDeadLetteredError],
  ['cancelled', TaskCancelledError],
  ['expired', TaskExpiredError],
]);

/** enqueue's options: the JavaScript name -> the Function's. */
const ENQUEUE_OPTIONS = new Map([
  ['priority', 'priority'], ['maxAttempts', 'max_attempts'], ['timeoutMs', 'timeout_ms'],
  ['delayMs', 'delay_ms'], ['ttlSeconds', 'ttl_seconds'], ['idempotencyKey', 'idempotency_key'],
  ['taskId', 'task_id'], ['limitKey', 'limit_key'], ['uniqueFor', 'unique_for'],
  ['uniqueKey', 'unique_key'], ['uniqueMode', 'unique_mode'], ['after', 'after'],
  ['onFailure', 'on_failure'], ['batch', 'batch'],
]);
/** The options every task of a group (batch, chain) takes (sections 4.5, 4.6). */
const GROUP_OPTIONS = new Map([...ENQUEUE_OPTIONS].filter(([js]) =>
  ['priority', 'maxAttempts', 'timeoutMs', 'delayMs', 'ttlSeconds', 'limitKey'].includes(js)));
/** A batch's options and its members'; a chain's and its links' (the Functions take the
 * pairs in any order). */
const BATCH_OPTIONS = new Map([
  ['batchId', 'batch_id'], ['onSuccess', 'on_success'], ['onSuccessPayload', 'on_success_payload'],
  ['onComplete', 'on_complete'], ['onCompletePayload', 'on_complete_payload'], ['open', 'open'],
  ['description', 'description'], ...GROUP_OPTIONS,
]);
const CHAIN_OPTIONS = new Map([['after', 'after'], ['onFailure', 'on_failure'], ...GROUP_OPTIONS]);

/** Result polling: the first wait, doubled up to the last (ms). */
const POLL_FIRST_MS = 5;
const POLL_MAX_MS = 500;

/** JSON text of a payload; a TypeError for what JSON cannot carry. */
function json(value, what) {
  const text = value === undefined ? 'null' : JSON.stringify(value);
  if (text === undefined) throw new TypeError(`${what}: a ${typeof value} is not JSON`);
  return text;
}

/** The options whose value is a JSON text (the callbacks' payloads), and the one flag. */
const JSON_OPTIONS = new Set(['onSuccessPayload', 'onCompletePayload']);
const FLAG_OPTIONS = new Set(['open']);

/**
 * name value pairs of the options given, as the Functions take them. Options of the
 * table `names` only; undefined and null are not sent; the callbacks' payloads are JSON;
 * `open` is a boolean; arrays (`after`) are joined with commas; other values are numbers
 * or strings (a boolean or an object is a TypeError, as in the Python SDK).
 */
function optionArgs(options, names, what) {
  const args = [];
  for (const [js, value] of Object.entries(options || {})) {
    const fn = names.get(js);
    if (fn === undefined) {
      throw new TypeError(`${what}: unknown option ${js}; it takes ${[...names.keys()].join(', ')}`);
    }
    if (value === undefined || value === null) continue;
    if (JSON_OPTIONS.has(js)) {
      args.push(fn, json(value, what));
    } else if (FLAG_OPTIONS.has(js)) {
      if (typeof value !== 'boolean') throw new TypeError(`${what}: ${js} must be a boolean`);
      if (value) args.push(fn, '1');
    } else if (Array.isArray(value)) {
      args.push(fn, value.map(String).join(','));
    } else if (typeof value === 'number' || typeof value === 'string') {
      args.push(fn, String(value));
    } else {
      throw new TypeError(`${what}: ${js} must be a number or a string, not a ${typeof value}`);
    }
  }
  return args;
}

/** n, then type and payload for each [type, payload] of tasks. */
function groupArgs(tasks, what) {
  const flat = [];
  for (const t of tasks) {
    if (!Array.isArray(t) || typeof t[0] !== 'string') {
      throw new TypeError(`${what}: each task is [taskType, payload]`);
    }
    flat.push(t[0], json(t[1], what));
  }
  return [String(flat.length / 2), ...flat];
}

/** node-redis, required when first needed (serving needs no dependency). */
function loadRedis() {
  try {
    return require('redis');
  } catch (e) {
    if (e.code !== 'MODULE_NOT_FOUND') throw e;
    throw new Error('the dtq Client needs node-redis 4: npm install redis, or apt-get install ' +
      'node-redis (with a Node.js not built by Debian, also NODE_PATH=/usr/share/nodejs)', { cause: e });
  }
}

/** node-redis's options for a URL: redis://, rediss://, or unix:///path?db=N. */
function redisOptions(url) {
  if (!url.startsWith('unix://')) return { url };
  const u = new URL(url);
  const opts = { socket: { path: decodeURIComponent(u.pathname) } };
  const db = u.searchParams.get('db');
  if (db) opts.database = Number(db);
  if (u.username) opts.username = decodeURIComponent(u.username);
  if (u.password) opts.password = decodeURIComponent(u.password);
  return opts;
}

/**
 * A producer's connection to dtq. Make one with {@link Client.connect}; close it with
 * {@link Client#close}. One connection, safe to share across a program's requests
 * (node-redis pipelines concurrent calls).
 */
class Client {
  /**
   * @param {object} redis a connected node-redis client
   * @param {{namespace?: string, clusterHashTag?: boolean}} [options]
   */
  constructor(redis, options = {}) {
    this.redis = redis;
    this.namespace = options.namespace || 'dtq';
    this.prefix = options.clusterHashTag ? `{${this.namespace}}` : this.namespace;
    this.ErrorReply = loadRedis().ErrorReply; // the error replies: mapped; other errors as they are
  }

  /**
   * Connects to Redis.
   * @param {string} [url] `redis://[user:password@]host:port/db`, `rediss://...`, or
   *   `unix:///path.sock?db=N`
   * @param {{namespace?: string, clusterHashTag?: boolean}} [options] `namespace`: the
   *   daemons' `[redis] namespace` (default `dtq`); `clusterHashTag`: as their
   *   `[redis] cluster_hash_tag` (keys `{<namespace>}:...`)
   * @returns {Promise<Client>}
   */
  static async connect(url = 'redis://localhost:6379/0', options = {}) {
    const redis = loadRedis();
    const opts = redisOptions(url);
    let connected = false;
    let lastError = null;
    // The first connect fails at once (node-redis would retry it for ever); once
    // connected, a lost connection is made again in the background (50 ms doubling to
    // 2 s), and a call made meanwhile fails rather than waiting in a queue: as redis-py.
    opts.socket = {
      ...opts.socket,
      reconnectStrategy: (retries) => (connected ? Math.min(50 * 2 ** retries, 2000)
        : new Error('the first connect failed')),
    };
    opts.disableOfflineQueue = true;
    const c = redis.createClient(opts);
    c.on('error', (e) => { lastError = e; });
    try {
      await c.connect();
    } catch (e) {
      throw lastError || e;
    }
    connected = true;
    return new Client(c, options);
  }

  /** Closes the connection once the calls under way are answered. */
  async close() {
    await this.redis.quit();
  }

  /** The dtq error of an error reply (its first word a code of section 5.2), else err. */
  mapError(err) {
    if (!(err instanceof this.ErrorReply)) return err;
    const text = err.message;
    const sp = text.indexOf(' ');
    const code = sp < 0 ? text : text.slice(0, sp);
    const Cls = CODES.get(code);
    if (Cls) return new Cls(text, code, sp < 0 ? '' : text.slice(sp + 1));
    if (/function not found/i.test(text)) {
      return new FunctionsNotLoadedError(`the dtq Functions of namespace ${this.namespace} are not ` +
        `loaded in this Redis (run: dtqctl -n ${this.namespace} functions install): ${text}`,
      'FUNCTION_NOT_FOUND', text);
    }
    return err;
  }

  async fcall(command, fn, args) {
    try {
      return await this.redis.sendCommand([command, `${this.namespace}_${fn}`, '0', ...args]);
    } catch (e) {
      throw this.mapError(e);
    }
  }

  /**
   * Enqueues a task: `FCALL <ns>_enqueue 0 queue taskType payload [option value]...`.
   * @param {string} queue
   * @param {string} taskType
   * @param {any} [payload] any JSON value
   * @param {object} [options] `priority`, `maxAttempts`, `timeoutMs`, `delayMs`,
   *   `ttlSeconds`, `idempotencyKey`, `taskId`, `limitKey`, `uniqueFor` (seconds, with
   *   `uniqueKey`, `uniqueMode`: `until_started`, `until_finished`, `debounce`), `after`
   *   (task ids to wait for) with `onFailure` (`cancel`, `run`, `dead_letter`), `batch`
   * @returns {Promise<string>} the task's id (an earlier task's for a duplicate)
   */
  async enqueue(queue, taskType, payload, options) {
    const args = [queue, taskType, json(payload, 'enqueue'), ...optionArgs(options, ENQUEUE_OPTIONS, 'enqueue')];
    const reply = await this.fcall('FCALL', 'enqueue', args);
    return String(reply[0]);
  }

  /**
   * Makes a batch in one atomic call: `FCALL <ns>_batch 0 create` (section 4.5).
   * @param {string} queue
   * @param {Array<[string, any]>} tasks [taskType, payload] pairs, at most 10,000
   * @param {object} [options] the batch's: `batchId`, `onSuccess` and `onComplete` (task
   *   types enqueued once into queue), `onSuccessPayload`, `onCompletePayload` (objects;
   *   the callbacks get them with a `batch` field), `open` (add members until
   *   {@link Client#batchClose}), `description`; and every member's: `priority`,
   *   `maxAttempts`, `timeoutMs`, `delayMs`, `ttlSeconds`, `limitKey`
   * @returns {Promise<{id: string, taskIds: string[]}>}
   */
  async batch(queue, tasks, options) {
    const reply = await this.fcall('FCALL', 'batch', ['create', queue, ...groupArgs(tasks, 'batch'),
      ...optionArgs(options, BATCH_OPTIONS, 'batch')]);
    const ids = reply.map(String);
    return { id: ids[0], taskIds: ids.slice(1) };
  }

  /**
   * Adds members to a batch that is not complete (open, or closed with members pending).
   * @returns {Promise<string[]>} their ids
   */
  async batchAdd(batchId, queue, tasks, options) {
    const reply = await this.fcall('FCALL', 'batch', ['add', batchId, queue, ...groupArgs(tasks, 'batchAdd'),
      ...optionArgs(options, GROUP_OPTIONS, 'batchAdd')]);
    return reply.map(String);
  }

  /**
   * Closes a batch.
   * @returns {Promise<string>} `closed`, or `complete` when nothing was pending
   */
  async batchClose(batchId) {
    return String(await this.fcall('FCALL', 'batch', ['close', batchId]));
  }

  /**
   * The batch: `FCALL_RO <ns>_batch_show` (`total`, `pending`, `succeeded`, `failed`,
   * `dead_lettered`, `state`, `on_success`, `on_complete`, `failed_ids`, ...).
   * @returns {Promise<object>}
   */
  async batchShow(batchId) {
    return JSON.parse(await this.fcall('FCALL_RO', 'batch_show', [batchId]));
  }

  /**
   * Enqueues tasks each waiting for the one before, which hands it its result
   * (`ctx.parentResults`): `FCALL <ns>_chain` (section 4.6).
   * @param {string} queue
   * @param {Array<[string, any]>} tasks [taskType, payload] pairs
   * @param {object} [options] `after` (what the first waits for), `onFailure` (every
   *   link's; default `cancel`), and every link's `priority`, `maxAttempts`,
   *   `timeoutMs`, `ttlSeconds`, `limitKey` (`delayMs` is refused: a link runs when the
   *   one before has succeeded)
   * @returns {Promise<string[]>} the ids, in order
   */
  async chain(queue, tasks, options) {
    const reply = await this.fcall('FCALL', 'chain', [queue, ...groupArgs(tasks, 'chain'),
      ...optionArgs(options, CHAIN_OPTIONS, 'chain')]);
    return reply.map(String);
  }

  /** @returns {Promise<string|null>} the task's status, or null when it does not exist */
  async status(taskId) {
    const s = await this.redis.hGet(`${this.prefix}:task:${taskId}`, 'status');
    return s ?? null;
  }

  /**
   * Waits until the task ends and resolves to its result (a JSON value; null for none).
   * Reads the task's status and `<p>:result:<id>` in one transaction, again after 5 ms,
   * then twice as long each time up to 0.5 s (no subscription: works whatever
   * `[limits] events` says).
   * @param {string} taskId
   * @param {{timeoutMs?: number}} [options]
   * @returns {Promise<any>} rejects with a {@link TaskError} subclass when it ended
   *   otherwise, {@link NotFoundError} when no such task exists,
   *   {@link ResultTruncatedError}, or {@link ResultTimeoutError}
   */
  async result(taskId, options = {}) {
    const key = `${this.prefix}:task:${taskId}`;
    const rkey = `${this.prefix}:result:${taskId}`;
    const start = Date.now();
    let wait = POLL_FIRST_MS;
    for (;;) {
      const [fields, result] = await this.redis.multi()
        .hmGet(key, ['status', 'last_error', 'last_error_class', 'result_truncated'])
        .get(rkey)
        .exec();
      const [status, lastError, errorClass, truncated] = fields;
      if (status === null || status === undefined) {
        throw new NotFoundError(`NOT_FOUND task ${taskId}`, 'NOT_FOUND', `task ${taskId}`);
      }
      if (TERMINAL.has(status)) {
        const Cls = TERMINAL.get(status);
        if (Cls) throw new Cls(taskId, status, lastError || '', errorClass || '');
        if (result === null || result === undefined) return null;
        if (truncated === '1') throw new ResultTruncatedError(taskId, result);
        return JSON.parse(result);
      }
      let pause = wait;
      if (options.timeoutMs !== undefined) {
        const left = options.timeoutMs - (Date.now() - start);
        if (left <= 0) throw new ResultTimeoutError(taskId, status, options.timeoutMs);
        pause = Math.min(wait, left);
      }
      await new Promise((resolve) => setTimeout(resolve, pause));
      wait = Math.min(wait * 2, POLL_MAX_MS);
    }
  }
}

module.exports = {
  Client,
  DtqError,
  InvalidArgumentError,
  NotFoundError,
  WrongStateError,
  NotEmptyError,
  PayloadTooLargeError,
  QueueFullError,
  IdempotencyInProgressError,
  IdExistsError,
  FunctionsNotLoadedError,
  TaskError,
  TaskFailedError,
  TaskDeadLetteredError,
  TaskCancelledError,
  TaskExpiredError,
  ResultTruncatedError,
  ResultTimeoutError,
};
