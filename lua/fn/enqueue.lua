-- lua/fn/enqueue.lua
-- FCALL <ns>_enqueue and <ns>_enqueue_bulk.
local fmt, ID_RULE, is_name, is_task_id, NAME_RULE, now_ms, opt_error, parse_int =
  util.fmt, util.ID_RULE, util.is_name, util.is_task_id, util.NAME_RULE, util.now_ms,
  util.opt_error, util.parse_int
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
local ENQUEUE_LIMITS, create_task, payload_refusal, read_task =
  task.ENQUEUE_LIMITS, task.create_task, task.payload_refusal, task.read_task
local DEPS =
  deps.DEPS
local LEAN =
  lean.LEAN
local UNIQUE =
  unique.UNIQUE

-- Enqueue options from args[first..]: a table, or nil and the INVALID_ARGUMENT message.
-- `per_task` allows the options that name one task (idempotency_key, task_id).
local function enqueue_options(c, args, first, per_task)
  local o = {priority = c.default_priority}
  if (#args - first + 1) % 2 ~= 0 then return nil, 'options come in name value pairs' end
  for i = first, #args, 2 do
    local name, v = args[i], args[i + 1]
    local lim = ENQUEUE_LIMITS[name]
    if lim then
      local n = parse_int(v, lim[1], lim[2])
      if not n then
        return nil, name .. ' must be an integer in [' .. fmt(lim[1]) .. ', ' .. fmt(lim[2]) .. ']'
      end
      o[name] = n
    elseif name == 'limit_key' then
      if not is_name(v) then return nil, 'limit_key must match ' .. NAME_RULE end
      o.limit_key = v
    elseif per_task and name == 'idempotency_key' then
      if #v < 1 or #v > 256 then return nil, 'idempotency_key must be 1-256 bytes' end
      o.idempotency_key = v
    elseif per_task and name == 'task_id' then
      if not is_task_id(v) then return nil, 'task_id must match ' .. ID_RULE end
      o.task_id = v
    elseif per_task and name == 'after' then
      local ids, why = DEPS.parse_after(v)
      if not ids then return nil, why end
      o.after = ids
    elseif per_task and name == 'on_failure' then
      if not DEPS.ON_FAILURE[v] then return nil, 'on_failure must be cancel, run or dead_letter' end
      o.on_failure = v
    elseif UNIQUE.OPTIONS[name] then -- lib/unique.lua
      if not per_task then
        return nil, name .. ' is refused in a bulk enqueue (a unique key names one task)'
      end
      local why = UNIQUE.option(o, name, v)
      if why then return nil, why end
    else
      return nil, 'unknown option ' .. name
    end
  end
  if o.on_failure and not o.after then return nil, 'on_failure needs after' end
  local uwhy = UNIQUE.settle(o) -- before delay_ms's checks: a debounce's window is its delay
  if uwhy then return nil, uwhy end
  if o.after and o.delay_ms and o.delay_ms > 0 then
    -- a waiting task starts when its parents are done: a delay would need the schedule
    -- to count from its release (enqueue it from the last parent's handler instead)
    return nil, 'delay_ms is refused with after (a waiting task is queued when its ' ..
                'parents are done)'
  end
  return o
end

local function queue_full(c, queue, depth)
  return redis.error_reply('QUEUE_FULL queue ' .. queue .. ' holds ' .. fmt(depth) ..
                           ' entries, max_queue_depth is ' .. fmt(c.max_queue_depth))
end

--[[ FCALL <ns>_enqueue 0 <queue> <task_type> <payload-json> [option value]...
Options: priority, max_attempts, timeout_ms, delay_ms, ttl_seconds, idempotency_key,
task_id, limit_key, after, on_failure, unique_for, unique_key, unique_mode. Replies
{task_id, 'created'|'duplicate'|'debounced'} ('debounced': lib/unique.lua). A task
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
  if lean and (o.idempotency_key or o.task_id or o.after or o.unique_for) then
    local what = o.after and 'after' or o.task_id and 'task_id' or
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

