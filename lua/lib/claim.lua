-- lua/lib/claim.lua
-- A delivered entry becomes a running attempt, or is settled: the general path
-- (process_entry) and the full lane's fast path (FULL.first).
local TERMINAL =
  CONST.TERMINAL
local fmt =
  util.fmt
local k =
  scope.k
local emit, emit_task =
  events.emit, events.emit_task
local ack, add_entry =
  streams.ack, streams.add_entry
local CREATED_FIELDS, dead_letter, dead_letter_poisoned, finish_terminal, history_add, in_cancelled,
      quarantine, read_task, task_poison =
  task.CREATED_FIELDS, task.dead_letter, task.dead_letter_poisoned, task.finish_terminal, task.history_add,
  task.in_cancelled, task.quarantine, task.read_task, task.task_poison
local resolve =
  policy.resolve
local materialize_raw =
  raw.materialize_raw
local LIM =
  limits.LIM
local LEAN =
  lean.LEAN
local UNIQUE =
  unique.UNIQUE

--[[ Whether a task whose entry was delivered may run now. Returns 'claim' (queued at the
entry's attempt), 'adopt' (the entry carries a running attempt of a lost worker), or nil
when the entry was settled here: acknowledged as terminal, retrying, cancelled, expired,
a stale duplicate, or dead-lettered because a lost worker had used the last attempt. ]]
local function settle_or_admit(c, ms, worker, stream, entry_id, tid, tkey, h, ent_attempt, source)
  local status = h.status
  -- <prefix>:cancelled of another type reads as empty (redis.pcall): it cancels nothing.
  if TERMINAL[status] or status == 'retrying' then
    redis.pcall('SREM', k('cancelled'), tid)
    ack(stream, entry_id)
    return nil
  end
  if in_cancelled(tid) then
    redis.pcall('SREM', k('cancelled'), tid)
    finish_terminal(c, tkey, h, 'cancelled', ms)
    emit(c, ms, 'TASK_CANCELLED', h, worker)
    ack(stream, entry_id)
    return nil
  end
  if status == 'running' and h.carrier == source then
    if tonumber(h.attempt) >= (tonumber(h.max_attempts) or 1) then
      if h.limit_slots then LIM.release(h.limit_slots, tid) end
      dead_letter(c, tkey, h, ms, 'worker_lost', 'worker_lost', worker)
      ack(stream, entry_id)
      return nil
    end
    return 'adopt'
  end
  if status ~= 'queued' or ent_attempt ~= tonumber(h.attempt) then
    ack(stream, entry_id)
    emit(c, ms, 'TASK_DUPLICATE_ABSORBED', h, worker, {entry_attempt = ent_attempt})
    return nil
  end
  local ttl = tonumber(h.ttl_seconds)
  if ttl and ms >= tonumber(h.created_at) + ttl * 1000 then
    finish_terminal(c, tkey, h, 'expired', ms)
    emit(c, ms, 'TASK_EXPIRED', h, worker)
    ack(stream, entry_id)
    return nil
  end
  return 'claim'
end

--[[ The claim: queued (or adopted) -> running at the attempt it runs, with the resolved
limits and the carrier entry. Returns the claimed-task array the daemon decodes
(src/task.c): stream, entry_id, task_id, queue, task_type, payload, attempt,
max_attempts, timeout_ms; for a released waiter also 0 (not lean) and its parent_results.
Only what no reader can derive is written (each field of the hash costs its write a scan
and a reallocation): status, worker_id, started_at, carrier (and attempt for an adoption).
Not updated_at: started_at is the time of this change, and readers take the latest of the
two (task_view). max_attempts and timeout_ms only when the hash does not hold those values
already: the first claim writes them, a later attempt only if its resolution changed. ]]
local function claim_task(c, ms, worker, policy, stream, entry_id, tid, tkey, h, adopt, source,
                          slots)
  local attempt = tonumber(h.attempt)
  if adopt then attempt = attempt + 1 end
  local ma, to = resolve(policy, h.task_type, h.own_max_attempts, h.own_timeout_ms)
  local now, sma, sto = fmt(ms), fmt(ma), fmt(to)
  local kept = h.max_attempts == sma and h.timeout_ms == sto
  -- A limited claim (LIM.gate ran) records the slot sets it holds (limit_slots: a claim
  -- without slots clears an earlier one), and the task is no longer limited_by anything.
  if h.limited_by then redis.call('HDEL', tkey, 'limited_by') end
  if adopt then
    history_add(tkey, h.history or false, h.attempt, ms, 'worker_lost', 'worker_lost', h.worker_id)
    redis.call('HSET', tkey, 'status', 'running', 'attempt', fmt(attempt), 'worker_id', worker,
               'started_at', now, 'carrier', source)
    if not kept then redis.call('HSET', tkey, 'max_attempts', sma, 'timeout_ms', sto) end
    if slots or h.limit_slots then redis.call('HSET', tkey, 'limit_slots', slots or '') end
  elseif slots or h.limit_slots then
    redis.call('HSET', tkey, 'status', 'running', 'worker_id', worker, 'started_at', now,
               'max_attempts', sma, 'timeout_ms', sto, 'carrier', source,
               'limit_slots', slots or '')
  elseif kept then -- the attempt and the limits are the hash's already
    redis.call('HSET', tkey, 'status', 'running', 'worker_id', worker, 'started_at', now,
               'carrier', source)
  else
    redis.call('HSET', tkey, 'status', 'running', 'worker_id', worker, 'started_at', now,
               'max_attempts', sma, 'timeout_ms', sto, 'carrier', source)
  end
  h.attempt = attempt
  -- lib/unique.lua: a start gives an until_started key back. (Never on FULL.first's fast path:
  -- a unique task's two fields make its hash's field count differ from CREATED_FIELDS.)
  if h.unique_key and h.unique_mode ~= 'until_finished' then
    UNIQUE.release(h.queue, h.unique_key, tid)
  end
  emit(c, ms, 'TASK_STARTED', h, worker)
  if h.parent_results then -- a released waiter: its parents' results go to its handler
    return {stream, entry_id, tid, h.queue, h.task_type, h.payload or '', attempt, ma, to, 0,
            h.parent_results}
  end
  return {stream, entry_id, tid, h.queue, h.task_type, h.payload or '', attempt, ma, to}
end

--[[ An adopted task that cannot run here now (no free slot): it goes back to its queue
at once, as a fresh entry, instead of waiting in this worker's pending list. `adopt`
bumps the attempt (the lost worker's attempt counts, as for any crash). ]]
local function requeue_reaped(c, ms, worker, stream, entry_id, tkey, h, adopt)
  if adopt then
    if h.limit_slots then LIM.release(h.limit_slots, h.id) end
    history_add(tkey, h.history or false, h.attempt, ms, 'worker_lost', 'worker_lost', h.worker_id)
    h.attempt = fmt(tonumber(h.attempt) + 1)
  end
  redis.call('HSET', tkey, 'status', 'queued', 'attempt', h.attempt, 'updated_at', fmt(ms))
  redis.call('HDEL', tkey, 'worker_id', 'carrier')
  add_entry(h, h.id)
  ack(stream, entry_id)
  emit(c, ms, 'TASK_QUEUED', h, worker, {reason = 'reaped'})
end
--[[ One stream entry delivered to `worker` (by XREADGROUP or XAUTOCLAIM): returns a
claimed task to run, or nil when the entry was settled here, or, with `requeue` (the
reaper has no slot for it), put back in its queue. A task hash task_poison() refuses is
dead-lettered (unless it is terminal already: then its entry is only acknowledged); a task
key of another type is quarantined. ]]
local function process_entry(c, ms, worker, policy, stream, queue, band, entry_id, fields,
                             requeue, mode)
  local source = stream .. '/' .. entry_id
  local tid, tkey, h, ent_attempt, bad, raw
  if #fields == 4 and fields[1] == 'task_id' and fields[3] == 'attempt' then
    tid, ent_attempt = fields[2], tonumber(fields[4]) -- dtq's own entry, the usual case
  else
    local f = {}
    for i = 1, #fields, 2 do f[fields[i]] = fields[i + 1] end
    raw = f.task_type ~= nil or f.attempt == nil or f.task_id == nil
    tid, ent_attempt = f.task_id, tonumber(f.attempt)
    if raw and LEAN.is(queue, fields[1], f) then
      local t, lh = LEAN.process(c, ms, worker, policy, stream, queue, band, entry_id, f,
                                 fields[1], mode, requeue)
      if t ~= false then return t end
      if lh then -- the task has a hash (now): the full path goes on from it
        tid, tkey, h, ent_attempt = lh.id, k('task', lh.id), lh, tonumber(lh.attempt)
      end
    end
    if raw and not h then
      tid, tkey, h = materialize_raw(c, ms, worker, stream, queue, band, entry_id, f, source)
      ent_attempt = 1
    end
  end
  if not raw then
    tkey = k('task', tid)
    h, bad = read_task(tkey, tid)
    if bad then quarantine(bad, tkey, source, ms) end
    if not h then ack(stream, entry_id) end -- expired, deleted, or quarantined
  end
  if not h then return nil end
  if not TERMINAL[h.status] then
    local why = task_poison(h)
    if why then
      dead_letter_poisoned(c, tkey, h, ms, why, worker)
      ack(stream, entry_id)
      return nil
    end
    -- dtq writes a task's entries only to its own stream (queue and band). An entry of
    -- dtq's shape elsewhere was forged (a raw XADD): absorbed, so that it cannot make a
    -- worker of another queue run the task, or let it jump ahead of its band.
    -- (`stream` is this queue's band `band`: comparing names spares building the key.)
    if not raw and h.carrier ~= source
       and (h.queue ~= queue or (tonumber(h.priority) or 5) ~= band) then
      ack(stream, entry_id)
      emit(c, ms, 'TASK_DUPLICATE_ABSORBED', h, worker, {entry_attempt = ent_attempt})
      return nil
    end
  end
  local admit = settle_or_admit(c, ms, worker, stream, entry_id, tid, tkey, h, ent_attempt, source)
  if not admit then return nil end
  local adopt, slots = admit == 'adopt', nil
  if not requeue then
    -- Limits: one lookup per queue and call; a task over a limit is deferred there (a
    -- claim), or requeued (an adoption: its lost attempt counts, as for any crash).
    local lims = LIM.of(h.queue)
    if lims then
      local ok
      ok, slots = LIM.gate(c, ms, worker, lims, stream, entry_id, tkey, h, adopt)
      if not ok then
        if adopt then requeue = true else return nil end
      end
    end
  end
  if requeue then
    requeue_reaped(c, ms, worker, stream, entry_id, tkey, h, adopt)
    return nil
  end
  return claim_task(c, ms, worker, policy, stream, entry_id, tid, tkey, h, adopt, source, slots)
end

--[[ The full lane's fast path (FULL.first): the claim of a task delivered by dtq's own entry
(task_id, attempt) whose hash is as create_task wrote it and untouched since: its ten
fields (HLEN: CREATED_FIELDS; one more for a batch's member, whose `batch` does not change
its claim: lib/batch.lua), queued at attempt 1 in this queue and band. One HMGET of the fields that
decide (the whole hash as a Lua table, and the poison check's field by field conversions,
cost a third of a fetch); any other hash (options of its own, a later attempt, a limit's
or a requeue's fields, damage) takes the general path, process_entry, which reads it again
and decides. The claim is what claim_task writes; it is appended to `out`, the flat list
of a group of fetch's full-claims (entry_id, task_id, task_type, payload, attempt,
max_attempts, timeout_ms: no table per task). Returns true, or false for the general path.
The caller has found the queue valid and without limits. ]]
local FULL = {}
function FULL.first(c, ms, worker, policy, stream, queue, band, entry_id, tid, attempt, out)
  if attempt ~= '1' then return false end
  local tkey = k('task', tid)
  local h = redis.pcall('HMGET', tkey, 'id', 'queue', 'task_type', 'payload', 'status',
                        'attempt', 'priority', 'created_at', 'batch')
  if h[5] ~= 'queued' or h[1] ~= tid or h[2] ~= queue or h[6] ~= '1' or h[7] ~= fmt(band) or
      not h[3] or not h[4] or not h[8] or
      redis.call('HLEN', tkey) ~= CREATED_FIELDS + (h[9] and 1 or 0) then
    return false
  end
  local ttype, created = h[3], h[8]
  if #created > 15 or not created:find('^%d+$') then return false end
  if call.ctx.any_cancelled ~= false and in_cancelled(tid) then return false end
  local ma, to = resolve(policy, ttype)
  redis.call('HSET', tkey, 'status', 'running', 'worker_id', worker, 'started_at', fmt(ms),
             'max_attempts', fmt(ma), 'timeout_ms', fmt(to), 'carrier', stream .. '/' .. entry_id)
  emit_task(c, ms, 'TASK_STARTED', tid, queue, ttype, 1, worker)
  local i = #out
  out[i + 1], out[i + 2], out[i + 3], out[i + 4] = entry_id, tid, ttype, h[4]
  out[i + 5], out[i + 6], out[i + 7] = 1, ma, to
  return true
end

return {FULL = FULL, process_entry = process_entry}
