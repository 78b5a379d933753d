-- lua/fn/backlog.lua
-- The schedule's view and admin (scheduled, sched_run_now, sched_delete) and clearing
-- or removing a queue.
local BANDS, TERMINAL =
  CONST.BANDS, CONST.TERMINAL
local first_line, fmt, is_name, NAME_RULE, now_ms, opt_error, parse_int, valid_name =
  util.first_line, util.fmt, util.is_name, util.NAME_RULE, util.now_ms, util.opt_error,
  util.parse_int, util.valid_name
local SCOPE, k =
  scope.SCOPE, scope.k
local reg =
  call.reg
local load_config =
  config.load_config
local audit, emit =
  events.audit, events.emit
local qlen_add, qlen_key, stream_key =
  streams.qlen_add, streams.qlen_key, streams.stream_key
local HISTORY_ERROR_MAX, dead_letter, dead_letter_poisoned, finish_terminal, in_cancelled,
      quarantine, read_task, task_poison, task_queue =
  task.HISTORY_ERROR_MAX, task.dead_letter, task.dead_letter_poisoned, task.finish_terminal,
  task.in_cancelled, task.quarantine, task.read_task, task.task_poison, task.task_queue
local materialize_raw =
  raw.materialize_raw
local promote_one =
  schedule.promote_one
local READ, arr, count_of, int_of, json_encode, last_delivered, queue_counts =
  view.READ, view.arr, view.count_of, view.int_of, view.json_encode, view.last_delivered,
  view.queue_counts

--[[ Scheduled tasks, and what an admin does with them and with a queue (docs/reference.md
5.6). <prefix>:retry:schedule is one sorted set per namespace (member = task id, score =
due ms), so a page filtered by queue, task type or class examines members one by one: at
most SCHED.SCAN_MAX per call, with a cursor to go on from. ]]
local SCHED = { -- the bounds of the schedule and queue admin Functions
  SCAN_MAX = 1000,    -- schedule members one scheduled page examines
  RANGE = 100,        -- members read per ZRANGE by a filtered page
  IDS_MAX = 500,      -- ids per sched_run_now or sched_delete call
  CLEAR_MAX = 1000,   -- waiting entries one queue_clear takes
  REMOVE_SCAN = 10000, -- schedule (and claimed) members queue_remove examines
}
local SCHED_KINDS = {pending = 'delayed', retrying = 'retrying'}
local SCHED_FILTER_MAX = {queue = 128, id_prefix = 256, task_type = 128, class = 64}
local SCHED_FIELDS = {'status', 'queue', 'task_type', 'attempt', 'max_attempts',
                      'own_max_attempts', 'last_error', 'last_error_class', 'priority',
                      'limited_by'}

-- Why a member waits (its `reason`), from its status, limited_by and last error's class:
-- a retry; a deferral by a limit; a hand-back by a worker without the type's handler
-- (outcome defer: unknown_task_type); else a delay its producer asked for.
local function sched_reason(status, limited_by, class)
  if status == 'retrying' then return 'retry' end
  if status ~= 'pending' then return 'other' end
  if limited_by then return 'limited' end
  if class == 'unknown_task_type' then return 'handed_back' end
  return 'delayed'
end

-- a < b bytewise, the order of members of equal score (Lua's < follows the locale).
local function bytes_less(a, b)
  for i = 1, math.min(#a, #b) do
    local x, y = a:byte(i), b:byte(i)
    if x ~= y then return x < y end
  end
  return #a < #b
end

-- The rank in `key` of the first member after (score s, member m) in the set's order.
local function sched_start(key, s, m)
  local cur = redis.pcall('ZSCORE', key, m)
  if type(cur) == 'string' and tonumber(cur) == tonumber(s) then
    return redis.call('ZRANK', key, m) + 1
  end
  -- m left (or moved): among the members scored s, the first that sorts after it
  local lo, hi = count_of('ZCOUNT', key, '-inf', '(' .. s), count_of('ZCOUNT', key, '-inf', s)
  while lo < hi do
    local mid = math.floor((lo + hi) / 2)
    local x = redis.call('ZRANGE', key, mid, mid)[1]
    if x and bytes_less(m, x) then hi = mid else lo = mid + 1 end
  end
  return lo
end

local function or_null(v) if v == nil or v == false then return cjson.null end return v end

-- A schedule member as the scheduled page lists it, from the HMGET of SCHED_FIELDS.
local function sched_item(tid, score, v)
  local kind = SCHED_KINDS[v[1]] or 'other'
  local o = {task_id = tid, due_ms = tonumber(score), status = or_null(v[1]), kind = kind,
             queue = or_null(v[2]), task_type = or_null(v[3]),
             attempt = v[4] and int_of(v[4]) or cjson.null, next_attempt = cjson.null,
             max_attempts = cjson.null, last_error = cjson.null,
             last_error_class = or_null(v[8]), priority = v[9] and int_of(v[9]) or cjson.null,
             reason = sched_reason(v[1], v[10], v[8]), limited_by = or_null(v[10])}
  if v[4] and kind ~= 'other' then
    o.next_attempt = int_of(v[4]) + (kind == 'retrying' and 1 or 0)
  end
  local ma = (kind == 'retrying' and v[5]) or v[6] or v[5]
  if ma then o.max_attempts = int_of(ma) end
  if v[7] then
    local line, cut = first_line(v[7], HISTORY_ERROR_MAX)
    o.last_error = line
    if cut then o.last_error_truncated = true end
  end
  return o
end

--[[ FCALL_RO <ns>_scheduled 0 <cursor|-> [count [filter value]...]: a page of
<prefix>:retry:schedule, soonest due first. Filters: queue, kind (delayed, retrying, all),
id_prefix, task_type, class (last_error_class); an empty value is no filter. The cursor is
<score>:<member> of the last member examined. ]]
local function scheduled(keys, args)
  local cursor, count, f = args[1], 50, {kind = 'all'}
  local cs, cm
  if cursor ~= nil and cursor ~= '' and cursor ~= '-' then
    cs, cm = cursor:match('^([^:]+):(.+)$')
    if not cs or not tonumber(cs) or not valid_name(cm, 256) then
      return opt_error('cursor must be <score>:<task_id> from next_cursor, or -')
    end
  end
  if args[2] and args[2] ~= '' then
    count = parse_int(args[2], 1, READ.PAGE_MAX)
    if not count then return opt_error('count must be an integer in [1, 500]') end
  end
  if #args > 2 and #args % 2 ~= 0 then return opt_error('filters come in name value pairs') end
  for i = 3, #args, 2 do
    local name, v = args[i], args[i + 1]
    if name == 'kind' then
      if v ~= '' and v ~= 'delayed' and v ~= 'retrying' and v ~= 'all' then
        return opt_error('kind must be delayed, retrying or all')
      end
      f.kind = v ~= '' and v or 'all'
    elseif SCHED_FILTER_MAX[name] then
      if v ~= '' and not valid_name(v, SCHED_FILTER_MAX[name]) then
        return opt_error(name .. ' must match [A-Za-z0-9._:-]{1,' ..
                         fmt(SCHED_FILTER_MAX[name]) .. '}')
      end
      if v ~= '' then f[name] = v end
    else
      return opt_error('unknown filter ' .. name)
    end
  end
  local filtered = f.kind ~= 'all' or f.queue or f.id_prefix or f.task_type or f.class
  local key, now = k('retry', 'schedule'), now_ms()
  local total = count_of('ZCARD', key)
  local pos = cs and sched_start(key, cs, cm) or 0
  local entries, scanned, last = {}, 0, nil
  while #entries < count and scanned < SCHED.SCAN_MAX and pos < total do
    local want = filtered and math.min(SCHED.RANGE, SCHED.SCAN_MAX - scanned) or
                 count - #entries
    local page = redis.pcall('ZRANGE', key, pos, pos + want - 1, 'WITHSCORES')
    if page.err or #page == 0 then break end
    for i = 1, #page - 1, 2 do
      local tid, score = page[i], page[i + 1]
      scanned, pos, last = scanned + 1, pos + 1, score .. ':' .. tid
      if not f.id_prefix or tid:sub(1, #f.id_prefix) == f.id_prefix then
        local v = redis.pcall('HMGET', k('task', tid), unpack(SCHED_FIELDS))
        if v.err then v = {} end
        local it = sched_item(tid, score, v)
        if (f.kind == 'all' or it.kind == f.kind) and (not f.queue or v[2] == f.queue) and
            (not f.task_type or v[3] == f.task_type) and (not f.class or v[8] == f.class) then
          entries[#entries + 1] = it
          if #entries == count then break end
        end
      end
      if scanned == SCHED.SCAN_MAX then break end
    end
  end
  local filter = {}
  for name in pairs(SCHED_FILTER_MAX) do filter[name] = or_null(f[name]) end
  filter.kind = f.kind
  return json_encode({time_ms = now, total = total,
                      claimed = count_of('ZCARD', k('retry', 'claimed')), count = count,
                      filter = filter, scanned = scanned, entries = arr(entries),
                      next_cursor = (pos < total and last) or cjson.null})
end

-- The task ids of a sched_run_now or sched_delete call (args[2..]), or nil and the error.
local function sched_ids(args)
  local ids = {}
  for i = 2, #args do
    if not valid_name(args[i], 256) then
      return nil, opt_error('task_id must match [A-Za-z0-9._:-]{1,256}')
    end
    ids[#ids + 1] = args[i]
  end
  if #ids == 0 or #ids > SCHED.IDS_MAX then
    return nil, opt_error('give 1 to ' .. fmt(SCHED.IDS_MAX) .. ' task ids after the actor')
  end
  return ids
end

local function actor_of(a)
  if a == nil or a == '' then return 'redis-cli' end
  return a
end

-- Takes `tid` out of the schedule and of the scheduler's claims; whether it was in either.
local function unschedule(tid)
  return redis.call('ZREM', k('retry', 'schedule'), tid) +
         redis.call('ZREM', k('retry', 'claimed'), tid) > 0
end

-- Ends a task an admin deleted: `cancelled`, metadata.deleted = true, TASK_CANCELLED.
local function end_deleted(c, tkey, h, ms)
  local ok, meta = pcall(cjson.decode, h.metadata or '{}')
  if not ok or type(meta) ~= 'table' then meta = {} end
  meta.deleted = true
  finish_terminal(c, tkey, h, 'cancelled', ms, {metadata = cjson.encode(meta)})
  emit(c, ms, 'TASK_CANCELLED', h, '', {deleted = true})
end

--[[ FCALL <ns>_sched_run_now 0 <actor> <task_id>...: each task leaves the schedule (or
the scheduler's claims) and is promoted at once, as the scheduler would (promote_one), in
this call: the scheduler cannot promote it again. One reply word per id: done (queued in
its stream), cancelled/expired/dead_lettered/failed (promotion ended it instead),
not_scheduled, not_found. ]]
local RUN_NOW_META = {reason = 'run_now'}
local function sched_run_now(keys, args)
  local ids, err = sched_ids(args)
  if not ids then return err end
  local actor, c, ms, out = actor_of(args[1]), load_config(), now_ms(), {}
  for i, tid in ipairs(ids) do
    local r
    if unschedule(tid) then
      r = promote_one(c, ms, '', tid, NS .. '_sched_run_now', RUN_NOW_META)
      if r == 'queued' then
        r = 'done'
      elseif r == 'gone' or r == 'quarantined' then
        r = 'not_found'
      elseif r == 'dropped' then
        r = 'not_scheduled'
      end
    else
      r = redis.call('TYPE', k('task', tid)).ok == 'hash' and 'not_scheduled' or 'not_found'
    end
    if r ~= 'not_found' and r ~= 'not_scheduled' then
      audit('sched_run_now', tid, actor, ms, task_queue(tid))
    end
    out[i] = r
  end
  return out
end

--[[ FCALL <ns>_sched_delete 0 <actor> <task_id>...: each delayed or retrying task leaves
the schedule and ends `cancelled` with metadata.deleted = true. One reply word per id:
done, not_scheduled (not in the schedule, or not pending/retrying: a stale member is
removed all the same), not_found; dead_lettered/failed for a poisoned hash. ]]
local function sched_delete(keys, args)
  local ids, err = sched_ids(args)
  if not ids then return err end
  local actor, c, ms, out = actor_of(args[1]), load_config(), now_ms(), {}
  for i, tid in ipairs(ids) do
    local was = unschedule(tid)
    local tkey = k('task', tid)
    local h, bad = read_task(tkey, tid)
    local r
    if bad then
      if was then quarantine(bad, tkey, NS .. '_sched_delete', ms) end
      r = 'not_found'
    elseif not h then
      r = 'not_found'
    elseif not was or (h.status ~= 'pending' and h.status ~= 'retrying') then
      r = 'not_scheduled'
    else
      local why = task_poison(h)
      if why then
        r = dead_letter_poisoned(c, tkey, h, ms, why, '')
      else
        end_deleted(c, tkey, h, ms)
        r = 'done'
      end
      audit('sched_delete', tid, actor, ms, task_queue(tid))
    end
    out[i] = r
  end
  return out
end

-- One waiting entry of queue `q`, band `band` (stream `s`), taken by queue_clear: its task
-- dead-lettered with class `cleared` (or, `delete`, ended as end_deleted does), and the
-- entry deleted. Returns whether a task was cleared (false: the entry was stale, or
-- settled as fetch would settle it, and only deleted).
local function clear_entry(c, ms, actor, s, q, band, e, delete)
  local entry_id, fields, f = e[1], e[2], {}
  local source = s .. '/' .. entry_id
  for i = 1, #fields - 1, 2 do f[fields[i]] = fields[i + 1] end
  local tid, tkey, h, bad, attempt
  if f.task_type ~= nil or f.attempt == nil or f.task_id == nil then
    qlen_add(q, 1) -- a raw entry counts from its first read (qlen_key)
    tid, tkey, h = materialize_raw(c, ms, '', s, q, band, entry_id, f, source)
    if not h then return false end -- absorbed, invalid (dead-lettered) or quarantined
    attempt = 1
  else
    tid, attempt = f.task_id, tonumber(f.attempt)
    tkey = k('task', tid)
    h, bad = read_task(tkey, tid)
    if bad then quarantine(bad, tkey, source, ms) end
  end
  if not h or h.status ~= 'queued' or tonumber(h.attempt) ~= attempt or h.queue ~= q or
      (tonumber(h.priority) or 5) ~= band then
    -- gone, stale, or not this stream's: fetch drops it too
    qlen_add(q, -redis.call('XDEL', s, entry_id))
    return false
  end
  if in_cancelled(tid) then redis.pcall('SREM', k('cancelled'), tid) end
  local why = task_poison(h)
  if why then
    dead_letter_poisoned(c, tkey, h, ms, why, '')
  elseif delete then
    end_deleted(c, tkey, h, ms)
  else
    dead_letter(c, tkey, h, ms, 'cleared: queue ' .. q .. ' cleared by ' .. actor, 'cleared', '')
  end
  qlen_add(q, -redis.call('XDEL', s, entry_id))
  return true
end

-- The first `n` waiting entries of stream `s` (after the group's last-delivered id).
local function waiting_page(s, n)
  local from = last_delivered(s)
  local page = redis.pcall('XRANGE', s, from and ('(' .. from) or '-', '+', 'COUNT', n)
  if page.err then return {} end
  return page
end

--[[ FCALL <ns>_queue_clear 0 <actor> <queue> [delete]: the queue's waiting entries (not
yet delivered; pending ones stay with their workers), p9 first, at most SCHED.CLEAR_MAX per
call. Replies {cleared, dropped, more}: more = 1 while waiting entries are left (call
again). One audit entry per call, with queue, mode and count. ]]
local function queue_clear(keys, args)
  local actor, q, mode = actor_of(args[1]), args[2], args[3]
  if not is_name(q) then
    return opt_error('queue name must match ' .. NAME_RULE)
  end
  local bad = SCOPE.refuse(q)
  if bad then return bad end
  if mode ~= nil and mode ~= '' and mode ~= 'delete' then
    return opt_error('the third argument must be delete, or nothing')
  end
  local delete = mode == 'delete'
  local c, ms = load_config(), now_ms()
  local cleared, dropped, left = 0, 0, SCHED.CLEAR_MAX
  for band = BANDS - 1, 0, -1 do
    if left == 0 then break end
    local s = stream_key(q, band)
    if redis.call('EXISTS', s) == 1 then
      for _, e in ipairs(waiting_page(s, left)) do
        left = left - 1
        if clear_entry(c, ms, actor, s, q, band, e, delete) then
          cleared = cleared + 1
        else
          dropped = dropped + 1
        end
      end
    end
  end
  local more = 0
  if left == 0 then
    for band = BANDS - 1, 0, -1 do
      local s = stream_key(q, band)
      if more == 0 and redis.call('EXISTS', s) == 1 and #waiting_page(s, 1) > 0 then more = 1 end
    end
  end
  audit('queue_clear', '', actor, ms, q,
        {'mode', delete and 'delete' or 'dead_letter', 'count', fmt(cleared)})
  return {cleared, dropped, more}
end

-- The non-terminal tasks of queue `q` among the first SCHED.REMOVE_SCAN members of the
-- schedule and of the claims.
local function scheduled_for(q)
  local n = 0
  for _, key in ipairs({k('retry', 'schedule'), k('retry', 'claimed')}) do
    local ids = redis.pcall('ZRANGE', key, 0, SCHED.REMOVE_SCAN - 1)
    if ids.err then ids = {} end
    for _, tid in ipairs(ids) do
      local v = redis.pcall('HMGET', k('task', tid), 'queue', 'status')
      if not v.err and v[1] == q and v[2] and not TERMINAL[v[2]] then n = n + 1 end
    end
  end
  return n
end

--[[ FCALL <ns>_queue_remove 0 <actor> <queue>: the queue leaves <prefix>:queues, and its
streams and paused flag are deleted, only when it holds nothing: no waiting entry, no
pending one, no task scheduled for it. Else NOT_EMPTY with the counts. ]]
local function queue_remove(keys, args)
  local actor, q = actor_of(args[1]), args[2]
  if not is_name(q) then
    return opt_error('queue name must match ' .. NAME_RULE)
  end
  local bad = SCOPE.refuse(q)
  if bad then return bad end
  if redis.pcall('SISMEMBER', k('queues'), q) ~= 1 then
    return redis.error_reply('NOT_FOUND queue ' .. q .. ' is not in ' .. k('queues'))
  end
  local n, sched = queue_counts(q), scheduled_for(q)
  if n.depth + n.pending + sched > 0 then
    return redis.error_reply('NOT_EMPTY queue ' .. q .. ' holds ' .. fmt(n.depth) ..
                             ' waiting, ' .. fmt(n.pending) .. ' pending, ' .. fmt(sched) ..
                             ' scheduled')
  end
  for band = 0, BANDS - 1 do
    local s = stream_key(q, band)
    if redis.call('TYPE', s).ok == 'stream' then redis.call('DEL', s) end
  end
  redis.call('DEL', k('queue', q, 'paused'), qlen_key(q))
  redis.call('SREM', k('queues'), q)
  audit('queue_remove', '', actor, now_ms(), q)
  return 'removed'
end

reg('scheduled', scheduled, true)
reg('sched_run_now', sched_run_now)
reg('sched_delete', sched_delete)
reg('queue_clear', queue_clear)
reg('queue_remove', queue_remove)

