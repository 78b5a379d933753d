-- lua/lib/raw.lua
-- Producers' raw entries (a plain XADD): checked, and made into tasks on first read.
local MAX_ATTEMPTS =
  CONST.MAX_ATTEMPTS
local fmt, ID_RULE, is_name, is_task_id, NAME_RULE, parse_int =
  util.fmt, util.ID_RULE, util.is_name, util.is_task_id, util.NAME_RULE, util.parse_int
local k =
  scope.k
local emit =
  events.emit
local ack, queue_known =
  streams.ack, streams.queue_known
local dead_letter, quarantine, read_task =
  task.dead_letter, task.quarantine, task.read_task

-- Why a raw entry cannot become a runnable task, or nil when it can.
local function raw_entry_error(c, f)
  if f.task_type == nil then return 'missing field task_type' end
  if not is_name(f.task_type) then return 'task_type must match ' .. NAME_RULE end
  if f.payload == nil then return 'missing field payload' end
  if #f.payload > c.max_payload_bytes then
    return 'payload of ' .. fmt(#f.payload) .. ' bytes exceeds max_payload_bytes '
           .. fmt(c.max_payload_bytes)
  end
  if not pcall(cjson.decode, f.payload) then return 'payload is not valid JSON' end
  if f.task_id ~= nil and not is_task_id(f.task_id) then
    return 'task_id must match ' .. ID_RULE
  end
  if f.max_attempts ~= nil and not parse_int(f.max_attempts, 1, MAX_ATTEMPTS) then
    return 'max_attempts must be an integer in [1, ' .. fmt(MAX_ATTEMPTS) .. ']'
  end
  if f.timeout_ms ~= nil and not parse_int(f.timeout_ms, 1, 2^53) then
    return 'timeout_ms must be a positive integer'
  end
  if f.ttl_seconds ~= nil and not parse_int(f.ttl_seconds, 1, 2^53) then
    return 'ttl_seconds must be a positive integer'
  end
  if f.idempotency_key ~= nil and (#f.idempotency_key < 1 or #f.idempotency_key > 256) then
    return 'idempotency_key must be 1-256 bytes'
  end
  if f.limit_key ~= nil and not is_name(f.limit_key) then
    return 'limit_key must match ' .. NAME_RULE
  end
  return nil
end

-- The task id of a raw producer entry's fields f: its own task_id when that is a valid id,
-- else the derived <queue>:p<band>:<entry-id> (also returned, second).
local function raw_task_id(f, queue, band, entry_id)
  local derived = queue .. ':p' .. fmt(band) .. ':' .. entry_id
  if f.task_id ~= nil and is_task_id(f.task_id) then return f.task_id, derived end
  return derived, derived
end

--[[ A raw producer entry (no `attempt` or `task_id`, or a `task_type`): its task, created on
first read. Returns tid, tkey, h; or nil when the entry was settled here (a duplicate by task
id or idempotency key, malformed: dead-lettered with the reason, or its task key holds
another type: quarantined). ]]
local function materialize_raw(c, ms, worker, stream, queue, band, entry_id, f, source)
  local tid, derived = raw_task_id(f, queue, band, entry_id)
  local tkey = k('task', tid)
  local h, bad = read_task(tkey, tid)
  if bad then
    quarantine(bad, tkey, source, ms)
    ack(stream, entry_id)
    return nil
  end
  if h then
    if h.source ~= source and tid ~= derived then
      -- A producer's id that exists already: the entry is a duplicate.
      ack(stream, entry_id)
      emit(c, ms, 'TASK_DUPLICATE_ABSORBED', h, worker)
      return nil
    end
    return tid, tkey, h -- this entry's own task, read again (a redelivery)
  end
  local err = raw_entry_error(c, f)
  if err == nil and f.idempotency_key ~= nil then
    local ikey = k('idempotency', queue, f.idempotency_key)
    local rec = {task_id = tid, state = 'processing', updated_at = ms}
    if not redis.call('SET', ikey, cjson.encode(rec), 'NX', 'EX', fmt(c.idem_ttl_s)) then
      ack(stream, entry_id)
      emit(c, ms, 'TASK_DUPLICATE_ABSORBED', {id = tid, queue = queue, task_type = f.task_type,
           attempt = 1}, worker, {idempotency_key = f.idempotency_key})
      return nil
    end
  end
  h = {id = tid, queue = queue, task_type = f.task_type or '', payload = f.payload or '',
       status = 'queued', attempt = '1', priority = fmt(band), created_at = fmt(ms),
       metadata = '{}', cancel_requested = '0', source = source}
  if err == nil then
    h.own_max_attempts = f.max_attempts
    h.own_timeout_ms = f.timeout_ms
    h.ttl_seconds = f.ttl_seconds
    h.idempotency_key = f.idempotency_key
    h.limit_key = f.limit_key
  elseif #h.payload > c.max_payload_bytes then
    -- A rejected entry must not park megabytes in its hash and its dead letter.
    h.payload = string.sub(h.payload, 1, c.max_payload_bytes)
    err = err .. ' (payload kept truncated to its first ' .. fmt(c.max_payload_bytes) .. ' bytes)'
  end
  local args = {}
  for name, v in pairs(h) do
    args[#args + 1] = name
    args[#args + 1] = v
  end
  redis.call('HSET', tkey, unpack(args))
  queue_known(queue)
  if err ~= nil then
    dead_letter(c, tkey, h, ms, 'invalid entry: ' .. err, 'invalid_entry', worker)
    ack(stream, entry_id)
    return nil
  end
  return tid, tkey, h
end

return {materialize_raw = materialize_raw, raw_entry_error = raw_entry_error,
        raw_task_id = raw_task_id}
