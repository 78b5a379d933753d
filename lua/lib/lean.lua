-- lua/lib/lean.lua
-- The lean lane: tasks that live as stream entries alone.
local BAND_NAMES, GROUP =
  CONST.BAND_NAMES, CONST.GROUP
local fmt, is_name, options_set =
  util.fmt, util.is_name, util.options_set
local k =
  scope.k
local emit_task =
  events.emit_task
local ack, qlen_key, qlen_resync, queue_known, stream_key, stream_queue =
  streams.ack, streams.qlen_key, streams.qlen_resync, streams.queue_known, streams.stream_key,
  streams.stream_queue
local in_cancelled, quarantine, read_task =
  task.in_cancelled, task.quarantine, task.read_task
local resolve =
  policy.resolve
local raw_entry_error =
  raw.raw_entry_error
local LIM =
  limits.LIM

--[[ The lean lane (docs/reference.md 4.3). A queue whose <prefix>:queue:<q>:mode is `lean`
takes its tasks as stream entries alone: no task hash while a task waits or runs. An entry
is lean when its first field is the marker `lean` (what <ns>_enqueue writes into a lean
queue, so a later mode switch changes nothing for it), or when it is a producer's raw entry
(a task_type, neither task_id nor idempotency_key) read from a queue that is lean. Its task
id is <queue>:p<band>:<entry-id>; its attempt is the entry's delivery count; a success is
an acknowledgement and a deletion in the finish call (its lean section). A failure, a lost
attempt that cannot go on lean (the last one, no free slot, a limit) or a cancel request
while it runs materialises the task: its hash is written from the entry as a full task's
would be, and from then on it is one. The call's context keeps the queue modes read
(call.sub('lean_modes')) and the policy a finish call's lean section carries (lean_policy). ]]
local LEAN = {}

function LEAN.mode_key(q) return k('queue', q, 'mode') end

-- Whether queue q is lean (a mode key of another type, or none: full), once per call.
function LEAN.on(q)
  local modes = call.sub('lean_modes')
  local m = modes[q]
  if m == nil then
    m = redis.pcall('GET', LEAN.mode_key(q)) == 'lean'
    modes[q] = m
  end
  return m
end

-- Whether an entry's fields f (a table; `first` its first field name) make it a lean entry
-- of `queue`.
function LEAN.is(queue, first, f)
  if first == 'lean' then return true end
  return f.task_type ~= nil and f.task_id == nil and f.idempotency_key == nil and LEAN.on(queue)
end

function LEAN.tid(queue, band, entry_id) return queue .. ':' .. BAND_NAMES[band] .. ':' .. entry_id end

-- Whether a lean entry's fields can run as they are: the rest (a bad name, payload or option)
-- goes the way of a raw entry (materialize_raw dead-letters it as invalid_entry). The payload
-- of a marked entry is not parsed again (<ns>_enqueue parsed it).
function LEAN.sound(c, first, f)
  if not is_name(f.task_type) or f.payload == nil or #f.payload > c.max_payload_bytes then
    return false
  end
  if first ~= 'lean' or f.max_attempts or f.timeout_ms or f.ttl_seconds or f.limit_key then
    return raw_entry_error(c, f) == nil
  end
  return true
end

--[[ Writes the hash of lean task `tid` from its entry's fields f, as the full task it becomes:
what creation would have written (created_at is the entry's time), the attempt `attempt`
in `status`, and the extra fields `more` (name, value...). Returns h. ]]
function LEAN.materialise(ms, tid, queue, band, stream, entry_id, f, status, attempt, more)
  local h = {id = tid, queue = queue, task_type = f.task_type, payload = f.payload or '',
             status = status, attempt = fmt(attempt), priority = fmt(band),
             created_at = fmt(tonumber(entry_id:match('^(%d+)')) or ms), metadata = '{}',
             cancel_requested = '0', source = stream .. '/' .. entry_id,
             own_max_attempts = f.max_attempts, own_timeout_ms = f.timeout_ms,
             ttl_seconds = f.ttl_seconds, limit_key = f.limit_key}
  for i = 1, #(more or {}), 2 do h[more[i]] = more[i + 1] end
  local a = {}
  for name, v in pairs(h) do
    a[#a + 1] = name
    a[#a + 1] = v
  end
  redis.call('HSET', k('task', tid), unpack(a))
  queue_known(queue)
  return h
end

-- The group's record of a delivered entry: consumer and delivery count, or nil.
function LEAN.pending(stream, entry_id)
  local p = redis.pcall('XPENDING', stream, GROUP, entry_id, entry_id, 1)
  if type(p) ~= 'table' or p.err or not p[1] then return nil end
  return p[1][2], tonumber(p[1][4]), tonumber(p[1][3])
end

--[[ A lean entry delivered to `worker`. `mode`: nil for a first delivery (fetch), 'reap' for
an adoption by XAUTOCLAIM (which counted the delivery), 'crashed' for recover's adoption of
a dead predecessor's entry (with `requeue`), 'lost' for recover's hand-over at the same
attempt. Returns a claimed task (with a 10th element, 1: lean), nil when the entry was
settled here, or false and a task hash (or false alone) for process_entry to go on the full
path with (nothing: as a raw entry). ]]
function LEAN.process(c, ms, worker, policy, stream, queue, band, entry_id, f, first, mode,
                      requeue)
  if not LEAN.sound(c, first, f) then return false end
  local tid = LEAN.tid(queue, band, entry_id)
  if mode == nil then
    if in_cancelled(tid) then -- an id a cancel left in the set (a lean task is deleted instead)
      redis.pcall('SREM', k('cancelled'), tid)
      ack(stream, entry_id)
      return nil
    end
    local ttl = tonumber(f.ttl_seconds)
    if ttl and ms >= (tonumber(entry_id:match('^(%d+)')) or ms) + ttl * 1000 then
      ack(stream, entry_id)
      emit_task(c, ms, 'TASK_EXPIRED', tid, queue, f.task_type, 1, worker)
      return nil
    end
    if LIM.of(queue) then return false end -- limits keep per-task state: a full task
    local ma, to = resolve(policy, f.task_type, f.max_attempts, f.timeout_ms)
    emit_task(c, ms, 'TASK_STARTED', tid, queue, f.task_type, 1, worker)
    return {stream, entry_id, tid, queue, f.task_type, f.payload, 1, ma, to, 1}
  end
  -- A delivery after the first: the task may have a hash (a cancel request materialised it).
  local tkey = k('task', tid)
  local h, bad = read_task(tkey, tid)
  if bad then
    quarantine(bad, tkey, stream .. '/' .. entry_id, ms)
    ack(stream, entry_id)
    return nil
  end
  if h then return false, h end
  local owner, deliveries = LEAN.pending(stream, entry_id)
  if not deliveries then return nil end -- not pending (any more): nothing to adopt
  local ma, to = resolve(policy, f.task_type, f.max_attempts, f.timeout_ms)
  if mode == 'lost' then
    redis.call('XCLAIM', stream, GROUP, worker, 0, entry_id, 'IDLE', 0, 'JUSTID')
    return {stream, entry_id, tid, queue, f.task_type, f.payload, deliveries, ma, to, 1}
  end
  -- The attempt that was lost: XAUTOCLAIM counted this delivery already, recover did not.
  local lost = mode == 'reap' and math.max(1, deliveries - 1) or deliveries
  if requeue or lost >= ma or LIM.of(queue) then
    -- Ends or waits as a full task: the hash of the running attempt that was lost, which
    -- the full path adopts (or dead-letters as worker_lost, or requeues).
    return false, LEAN.materialise(ms, tid, queue, band, stream, entry_id, f, 'running', lost,
                                   {'worker_id', owner or '', 'max_attempts', fmt(ma),
                                    'timeout_ms', fmt(to), 'carrier', stream .. '/' .. entry_id,
                                    'started_at', fmt(ms)})
  end
  emit_task(c, ms, 'TASK_STARTED', tid, queue, f.task_type, lost + 1, worker)
  return {stream, entry_id, tid, queue, f.task_type, f.payload, lost + 1, ma, to, 1}
end

--[[ The first delivery (fetch) of a lean entry of the plain shape <ns>_enqueue writes
without options (lean 1 task_type T payload P), from its fields' values alone: no field
table, and only the checks that shape leaves (the name and the size of the payload; its
JSON was parsed at enqueue; no ttl, no own limits or options). The caller has found the
queue without limits. The claim is appended to `out`, the flat list of a group of fetch's
lean-claims (entry_id, task_type, payload, max_attempts, timeout_ms: no table per task);
returns true, nil when the entry was settled here (cancelled), or false for the general
path (an entry that is not sound). ]]
function LEAN.first(c, ms, worker, policy, stream, queue, band, entry_id, ttype, payload, out)
  if not is_name(ttype) or #payload > c.max_payload_bytes then return false end
  if call.ctx.any_cancelled ~= false or c.events ~= 'off' then
    local tid = queue .. ':' .. BAND_NAMES[band] .. ':' .. entry_id
    if in_cancelled(tid) then
      redis.pcall('SREM', k('cancelled'), tid)
      ack(stream, entry_id)
      return nil
    end
    emit_task(c, ms, 'TASK_STARTED', tid, queue, ttype, 1, worker)
  end
  local n = #out
  out[n + 1], out[n + 2], out[n + 3] = entry_id, ttype, payload
  out[n + 4], out[n + 5] = resolve(policy, ttype)
  return true
end

-- The queue's length counter (for QUEUE_FULL) and whether it is lean, in one MGET.
function LEAN.depth_mode(queue)
  local v = redis.pcall('MGET', qlen_key(queue), LEAN.mode_key(queue))
  if v.err then v = {} end
  local n = tonumber(v[1])
  if not n or n < 0 or n % 1 ~= 0 then n = qlen_resync(queue) end
  local lean = v[2] == 'lean'
  call.sub('lean_modes')[queue] = lean
  return n, lean
end

-- A lean task: its entry alone (the marker first, then what running it takes). Returns its
-- id; the caller counts the entry in the queue's counter.
function LEAN.add(c, ms, queue, ttype, payload, o)
  local stream, id = stream_key(queue, o.priority), nil
  if o.max_attempts or o.timeout_ms or o.ttl_seconds or o.limit_key then
    id = redis.call(unpack(options_set(
      {'XADD', stream, '*', 'lean', '1', 'task_type', ttype, 'payload', payload},
      'max_attempts', o.max_attempts and fmt(o.max_attempts),
      'timeout_ms', o.timeout_ms and fmt(o.timeout_ms),
      'ttl_seconds', o.ttl_seconds and fmt(o.ttl_seconds), 'limit_key', o.limit_key)))
  else
    id = redis.call('XADD', stream, '*', 'lean', '1', 'task_type', ttype, 'payload', payload)
  end
  local tid = LEAN.tid(queue, o.priority, id)
  emit_task(c, ms, 'TASK_QUEUED', tid, queue, ttype, 1, '')
  return tid
end

--[[ The end of a lean attempt that is not a plain success (finish, handback): the task is
materialised, running at `attempt` on `worker` (the hash a full task would have), when its
entry is a lean one pending for this worker at that attempt. Returns 'gone' (no such entry:
acknowledge it), 'stale' (another delivery holds it: leave it), or true. ]]
function LEAN.settle(ms, worker, stream, entry_id, attempt, policy)
  local e = redis.pcall('XRANGE', stream, entry_id, entry_id)
  if type(e) ~= 'table' or e.err or not e[1] then return 'gone' end
  local fields, f = e[1][2], {}
  for i = 1, #fields, 2 do f[fields[i]] = fields[i + 1] end
  local queue = stream_queue(stream)
  local band = tonumber(stream:match(':p(%d)$'))
  if not queue or not band or not (fields[1] == 'lean' or
      (f.task_type ~= nil and f.task_id == nil and f.idempotency_key == nil)) then
    return 'gone'
  end
  local owner, deliveries = LEAN.pending(stream, entry_id)
  if owner ~= worker or deliveries ~= attempt then return 'stale' end
  local ma, to = resolve(policy, f.task_type, f.max_attempts, f.timeout_ms)
  LEAN.materialise(ms, LEAN.tid(queue, band, entry_id), queue, band, stream, entry_id, f,
                   'running', attempt, {'worker_id', worker, 'max_attempts', fmt(ma),
                   'timeout_ms', fmt(to), 'carrier', stream .. '/' .. entry_id,
                   'started_at', fmt(ms)})
  return true
end

return {LEAN = LEAN}
