-- lua/fn/enqueue.lua
-- FCALL <ns>_enqueue and <ns>_enqueue_bulk.
local fmt, is_name, NAME_RULE, now_ms, opt_error, parse_int =
  util.fmt, util.is_name, util.NAME_RULE, util.now_ms, util.opt_error, util.parse_int
local SCOPE, k =
  scope.SCOPE, scope.k
local reg =
  call.reg
local enqueue_config, load_config =
  config.enqueue_config, config.load_config
local free_task_id, next_seq, seq_incr =
  ids.free_task_id, ids.next_seq, ids.seq_incr
local qlen_add, qlen_resync, queue_known =
  streams.qlen_add, streams.qlen_resync, streams.queue_known
local create_task, payload_refusal, read_task =
  task.create_task, task.payload_refusal, task.read_task
local DEPS =
  deps.DEPS
local enqueue_options, queue_full =
  options.enqueue_options, options.queue_full
local BATCH =
  batch.BATCH
local LEAN =
  lean.LEAN
local UNIQUE =
  unique.UNIQUE

--[[ FCALL <ns>_enqueue 0 <queue> <task_type> <payload-json> [option value]...
Options: priority, max_attempts, timeout_ms, delay_ms, ttl_seconds, idempotency_key,
task_id, limit_key, after, on_failure, batch (lib/batch.lua: the task joins that batch),
unique_for, unique_key, unique_mode. Replies {task_id, 'created'|'duplicate'|'debounced'}
('debounced': lib/unique.lua). A task
`after` others is written waiting and wired to them (lib/deps.lua): it may be released,
or ended, in this very call when its parents are done already. ]]
local function enqueue(keys, args)
  local queue, ttype, payload = args[1], args[2], args[3]
  if not is_name(queue) then
    return opt_error('queue name must match ' .. NAME_RULE)
  end
  local bad = SCOPE.refuse(queue)
  if bad then return bad end
  if not is_name(ttype) then
    return opt_error('task_type must match ' .. NAME_RULE)
  end
  if payload == nil then return opt_error('payload is required') end
  local c = enqueue_config()
  local o, oerr = enqueue_options(c, args, 4, true)
  if not o then return opt_error(oerr) end
  local refusal = payload_refusal(c, payload)
  if refusal then return refusal end
  local depth, lean = LEAN.depth_mode(queue)
  -- A counter at the limit is checked against the streams before anything is refused: a
  -- producer, who holds SET on it (its enqueues write it), must not fill a queue with a
  -- number (the XLEN sum heals it).
  if depth >= c.max_queue_depth then depth = qlen_resync(queue) end
  lean = lean and not (o.delay_ms and o.delay_ms > 0) -- a delayed task is a full one
  if lean and (o.idempotency_key or o.task_id or o.after or o.batch or o.unique_for) then
    local what = o.after and 'after' or o.batch and 'batch' or o.task_id and 'task_id' or
                 o.unique_for and 'unique_for' or 'idempotency_key'
    return opt_error(what .. ' is refused on lean queue ' .. queue ..
                     ' (a lean task keeps no record by id)')
  end

  local ikey
  if o.idempotency_key then
    ikey = k('idempotency', queue, o.idempotency_key)
    local rec = redis.call('GET', ikey)
    if rec then
      local ok, r = pcall(cjson.decode, rec)
      if ok and type(r) == 'table' then
        if r.state == 'processing' then
          return redis.error_reply('IDEMPOTENCY_IN_PROGRESS ' .. tostring(r.task_id))
        end
        return {tostring(r.task_id), 'duplicate'}
      end
    end
  end
  local ulock
  if o.unique_for then
    local held
    held, ulock = UNIQUE.check(c, now_ms(), queue, ttype, payload, o)
    if held then return held end
  end
  if o.task_id and redis.call('EXISTS', k('task', o.task_id)) == 1 then
    return redis.error_reply('ID_EXISTS task ' .. o.task_id .. ' exists')
  end
  if o.after then
    local refusal = DEPS.refusal(o.after)
    if refusal then return refusal end
  end
  if o.batch then
    local refusal = BATCH.join_refusal(o.batch, 1)
    if refusal then return refusal end
  end
  if depth >= c.max_queue_depth then return queue_full(c, queue, depth) end

  local ms = now_ms()
  if lean then
    local tid = LEAN.add(c, ms, queue, ttype, payload, o)
    qlen_add(queue, 1)
    queue_known(queue)
    return {tid, 'created'}
  end
  local tid, tkey = o.task_id, nil
  if not tid then tid, tkey = free_task_id(ms, fmt(ms) .. '-' .. next_seq()) end
  if not tid then return redis.error_reply('ID_EXISTS every id minted was taken (<p>:seq rewound?)') end
  qlen_add(queue, create_task(c, ms, tid, queue, ttype, payload, o, tkey))
  queue_known(queue)
  if ikey then
    redis.call('SET', ikey, cjson.encode({task_id = tid, state = 'processing', updated_at = ms}),
               'EX', fmt(c.idem_ttl_s))
  end
  if ulock then UNIQUE.take(ulock, tkey or k('task', tid), tid, o) end
  if o.batch then -- before the wiring, which may end it at once (a parent that failed)
    tkey = tkey or k('task', tid)
    BATCH.join(o.batch, tkey)
  end
  if o.after then
    tkey = tkey or k('task', tid)
    redis.call('HSET', tkey, 'after', table.concat(o.after, ','), 'on_failure',
               o.on_failure or 'cancel', 'deps_pending', fmt(#o.after))
    DEPS.wire(load_config(), ms, tkey, read_task(tkey, tid))
  end
  return {tid, 'created'}
end

local ENQUEUE_BULK_MAX = 10000

--[[ FCALL <ns>_enqueue_bulk 0 <queue> <task_type> <n> <payload-json>... [option value]...
n tasks of one type into one queue in one call (at most ENQUEUE_BULK_MAX); the options
(priority, max_attempts, timeout_ms, delay_ms, ttl_seconds, limit_key) apply to every one. Ids are
minted as for <ns>_enqueue. Replies a flat array, one element per payload, in order: the
task id of the task created, or the error that payload alone got (PAYLOAD_TOO_LARGE,
INVALID_ARGUMENT, QUEUE_FULL once the queue is full); the others are created all the same.
(Not a {task_id, 'created'} pair per task: a table per task, and its conversion to RESP,
cost a fifth of the call.) An error in the arguments themselves refuses the whole call. ]]
local function enqueue_bulk(keys, args)
  local queue, ttype, n = args[1], args[2], parse_int(args[3], 0, ENQUEUE_BULK_MAX)
  if not is_name(queue) then
    return opt_error('queue name must match ' .. NAME_RULE)
  end
  local bad = SCOPE.refuse(queue)
  if bad then return bad end
  if not is_name(ttype) then
    return opt_error('task_type must match ' .. NAME_RULE)
  end
  if not n or #args < 3 + n then
    return opt_error('n must be the number of payloads that follow, at most ' ..
                     fmt(ENQUEUE_BULK_MAX))
  end
  local c = load_config()
  local o, oerr = enqueue_options(c, args, 4 + n, false)
  if not o then return opt_error(oerr) end
  local ms = now_ms()
  local depth, lean = LEAN.depth_mode(queue)
  -- A counter at the limit is checked against the streams before anything is refused: a
  -- producer, who holds SET on it (its enqueues write it), must not fill a queue with a
  -- number (the XLEN sum heals it).
  if depth >= c.max_queue_depth then depth = qlen_resync(queue) end
  local added = 0
  local out = {}
  if lean and not (o.delay_ms and o.delay_ms > 0) then -- lean: the entries alone, no ids minted
    for i = 1, n do
      local payload = args[3 + i]
      local refusal = payload_refusal(c, payload)
      if refusal then
        out[i] = refusal
      elseif depth >= c.max_queue_depth then
        out[i] = queue_full(c, queue, depth)
      else
        out[i] = LEAN.add(c, ms, queue, ttype, payload, o)
        depth, added = depth + 1, added + 1
      end
    end
    qlen_add(queue, added)
    queue_known(queue)
    return out
  end
  local seq = seq_incr(n) - n
  -- Whether any id of this call's range is taken, in one EXISTS per 1,000 ids rather
  -- than one per task; only then is each checked on its own (free_task_id).
  local taken, tids, tkeys, at = false, {}, {}, fmt(ms) .. '-'
  for first = 1, n, 1000 do
    local last = math.min(n, first + 999)
    for i = first, last do
      tids[i] = at .. fmt(seq + i)
      tkeys[i] = k('task', tids[i])
    end
    if redis.call('EXISTS', unpack(tkeys, first, last)) > 0 then taken = true end
  end
  for i = 1, n do
    local payload = args[3 + i]
    local refusal = payload_refusal(c, payload)
    if refusal then
      out[i] = refusal
    elseif depth >= c.max_queue_depth then
      out[i] = queue_full(c, queue, depth)
    else
      local tid, tkey = tids[i], tkeys[i]
      if taken then tid, tkey = free_task_id(ms, tid) end
      if tid then
        local one = create_task(c, ms, tid, queue, ttype, payload, o, tkey)
        depth, added = depth + one, added + one
        out[i] = tid
      else
        out[i] = redis.error_reply('ID_EXISTS every id minted was taken (<p>:seq rewound?)')
      end
    end
  end
  qlen_add(queue, added)
  queue_known(queue)
  return out
end
reg('enqueue', enqueue)
reg('enqueue_bulk', enqueue_bulk)

