-- lua/lib/events.lua
-- The lifecycle events (one builder and publisher for every type) and the audit stream
-- of admin actions.
local fmt, is_name, iso =
  util.fmt, util.is_name, util.iso
local SCOPE, k =
  scope.SCOPE, scope.k
local next_seq =
  ids.next_seq

local TERMINAL_EVENTS = {TASK_SUCCEEDED = true, TASK_FAILED = true, TASK_DEAD_LETTERED = true,
                         TASK_CANCELLED = true, TASK_EXPIRED = true, WORKER_STARTED = true,
                         WORKER_STOPPED = true}

-- '1' .. '1024', made once (by the first call that emits: the standard library is out of
-- reach while the library loads) and kept, constants as they are: the number of an event
-- within its call would otherwise cost a string.format per event.
local SMALL_INTS = nil

-- The next event id of this call, evt-<ms>-<seq>-<n>: the part before <n> (the call's
-- clock and sequence number) is the same for every event of the call.
local function next_event_id(ms)
  local cx = call.ctx
  if not cx.eid_prefix then
    if not cx.seq then next_seq() end
    cx.eid_prefix = 'evt-' .. fmt(ms) .. '-' .. cx.seq .. '-'
    if not SMALL_INTS then
      SMALL_INTS = {}
      for i = 1, 1024 do SMALL_INTS[i] = string.format('%d', i) end
    end
  end
  local n = cx.events + 1
  cx.events = n
  return cx.eid_prefix .. (SMALL_INTS[n] or fmt(n))
end

--[[ The one builder and publisher of lifecycle events, for every event type: the id and
the time come from the Redis clock of the call, the level filter is [limits] events as
published in <prefix>:config, and the stream copy honours events_stream_maxlen. ]]
local function event_wanted(c, etype)
  if c.events == 'off' then return false end
  if c.events == 'terminal' and not TERMINAL_EVENTS[etype] then return false end
  local cx = call.ctx
  if cx.listeners == nil then
    -- Once per call: an event nobody can receive (no subscriber, no pattern subscriber,
    -- no events stream) is not built at all. Nothing is lost: PUBLISH to nobody is a no-op.
    -- In a cluster NUMSUB counts this node's subscribers only, and PUBLISH reaches them
    -- all: publish whenever events are on.
    cx.listeners = SCOPE.cluster or c.events_stream_maxlen > 0 or
                     redis.call('PUBSUB', 'NUMSUB', k('events'))[2] > 0 or
                     redis.call('PUBSUB', 'NUMPAT') > 0
  end
  return cx.listeners
end

-- Publishes one event of task `tid` (its queue, task type and attempt given one by one, so
-- that a caller holding them apart builds no table for it).
-- The ISO time of the last clock an event was built at (across calls: it depends on the
-- clock alone).
local ts_ms, ts = nil, nil

local function emit_task(c, ms, etype, tid, queue, ttype, attempt, worker, meta)
  if not event_wanted(c, etype) then return end
  if ts_ms ~= ms then ts_ms, ts = ms, iso(ms) end
  tid, queue, ttype = tid or '', queue or '', ttype or ''
  attempt, worker = tonumber(attempt) or 0, worker or ''
  local eid, json = next_event_id(ms)
  -- The usual event is built as one string: a Lua table per event and its encoding cost
  -- more than the PUBLISH. Queues, task types and worker ids are few and need no escaping
  -- when they are valid names (is_name keeps its answers); the task id, different
  -- every time, is escaped by cjson alone. Anything else takes the table and cjson.
  if (queue == '' or is_name(queue)) and (ttype == '' or is_name(ttype)) and
      (worker == '' or is_name(worker)) and attempt % 1 == 0 and attempt >= 0 and
      attempt < 2^53 then
    json = '{"event_id":"' .. eid .. '","ts":"' .. ts .. '","type":"' .. etype ..
           '","task_id":' .. cjson.encode(tid) .. ',"queue":"' .. queue .. '","task_type":"' ..
           ttype .. '","attempt":' .. fmt(attempt) .. ',"worker_id":"' .. worker ..
           (meta and ('","metadata":' .. cjson.encode(meta) .. '}') or '"}')
  else
    local ev = {event_id = eid, ts = ts, type = etype, task_id = tid,
                queue = queue, task_type = ttype, attempt = attempt, worker_id = worker}
    if meta then ev.metadata = meta end
    json = cjson.encode(ev)
  end
  -- one channel per namespace in either layout: {<ns>}:events in a cluster
  redis.call('PUBLISH', SCOPE.cluster and ('{' .. NS .. '}:events') or k('events'), json)
  if c.events_stream_maxlen > 0 then
    redis.call('XADD', k('stream', 'events'), 'MAXLEN', '~', fmt(c.events_stream_maxlen), '*',
               'event', json)
  end
end

local function emit(c, ms, etype, h, worker_id, meta)
  emit_task(c, ms, etype, h.id, h.queue, h.task_type, h.attempt, worker_id, meta)
end

--[[ One entry of <prefix>:stream:audit: who (`actor`; none or empty: redis-cli) did what
(`action`) to which task (`task_id`, and `queue`, the task's queue) or queue (`queue`, an
empty `task_id`), when (`ts`); `more` adds field/value pairs (purge_dlq's `removed`). ]]
local function audit(action, tid, actor, ms, queue, more)
  if actor == nil or actor == '' then actor = 'redis-cli' end
  local cmd = {'XADD', k('stream', 'audit'), 'MAXLEN', '~', '10000', '*', 'actor', actor,
               'action', action, 'task_id', tid or '', 'queue', queue or '', 'ts', fmt(ms)}
  for _, v in ipairs(more or {}) do cmd[#cmd + 1] = v end
  redis.call(unpack(cmd))
end

return {audit = audit, emit = emit, emit_task = emit_task, event_wanted = event_wanted}
