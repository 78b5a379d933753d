-- lua/fn/read.lua
-- The read model: FCALL_RO Functions that answer what dtq-web and dtqctl show.
local BANDS, GROUP =
  CONST.BANDS, CONST.GROUP
local fmt, hgetall_map, is_name, NAME_RULE, now_ms, opt_error, parse_int, valid_name =
  util.fmt, util.hgetall_map, util.is_name, util.NAME_RULE, util.now_ms, util.opt_error,
  util.parse_int, util.valid_name
local SCOPE, k =
  scope.SCOPE, scope.k
local reg =
  call.reg
local load_config =
  config.load_config
local stream_key =
  streams.stream_key
local wrong_type =
  task.wrong_type
local raw_task_id =
  raw.raw_task_id
local LEAN =
  lean.LEAN
local MARK, READ, arr, count_of, id_ms, int_of, json_decode, json_encode, json_verbatim,
      last_delivered, queue_counts, valid_stream_id =
  view.MARK, view.READ, view.arr, view.count_of, view.id_ms, view.int_of, view.json_decode,
  view.json_encode, view.json_verbatim, view.last_delivered, view.queue_counts,
  view.valid_stream_id

-- The known queues, sorted (a <prefix>:queues of another type lists none). In the cluster
-- layout a queue's call knows its queue, and a {<ns>} call none (its answer is the global
-- part: the clients ask each queue of {<ns>}:queues and merge).
local function sorted_queues()
  if SCOPE.cluster then return SCOPE.queue and {SCOPE.queue} or {} end
  local names = redis.pcall('SMEMBERS', k('queues'))
  if names.err then names = {} end
  table.sort(names)
  return names
end

-- FCALL_RO <ns>_stats 0: flat name/value pairs (SPEC 8), for the queues in <prefix>:queues
-- (added by enqueue, by raw-entry fetch and by the daemon's setup): no keyspace SCAN.
local function stats(keys, args)
  local order = sorted_queues()
  local out = {}
  for _, q in ipairs(order) do
    local n = queue_counts(q)
    out[#out + 1] = 'queue:' .. q .. ':depth'
    out[#out + 1] = n.depth
    out[#out + 1] = 'queue:' .. q .. ':pending'
    out[#out + 1] = n.pending
    out[#out + 1] = 'queue:' .. q .. ':paused'
    out[#out + 1] = redis.call('EXISTS', k('queue', q, 'paused'))
    out[#out + 1] = 'queue:' .. q .. ':mode'
    out[#out + 1] = LEAN.on(q) and 'lean' or 'full'
  end
  local live = 0
  for _, w in ipairs(redis.call('SMEMBERS', k('workers'))) do
    live = live + redis.call('EXISTS', k('worker', w))
  end
  for _, kv in ipairs({{'scheduled', redis.call('ZCARD', k('retry', 'schedule'))},
                       {'claimed', redis.call('ZCARD', k('retry', 'claimed'))},
                       {'dlq', redis.call('XLEN', k('stream', 'dead-letter'))},
                       {'workers', live}}) do
    out[#out + 1] = kv[1]
    out[#out + 1] = kv[2]
  end
  return out
end

--[[ The read model: FCALL_RO Functions that answer what dtq-web and dtqctl show as one JSON
text, so that its shape is spelled here alone and clients parse and render it
(docs/reference.md 5.5). Every one is bounded per call and reads no keyspace SCAN. ]]

-- A flat field/value list (a stream entry's fields) as an object of strings, the first of
-- equal fields kept; values longer than `cap` bytes (nil: no cap) cut, <field>_truncated set.
local function fields_object(flat, cap)
  local o = {}
  for i = 1, #flat - 1, 2 do
    local f, v = flat[i], flat[i + 1]
    if o[f] == nil then
      if cap and #v > cap then
        o[f], o[f .. '_truncated'] = v:sub(1, cap), true
      else
        o[f] = v
      end
    end
  end
  return o
end

-- A worker hash as clients show it: the hash fields (but worker_id), these typed as
-- numbers; heartbeat_age_ms from the Redis clock; the q:<queue>:<counter> fields of the
-- heartbeat as numbers under queues.<queue>.<counter>.
local WORKER_NUMBERS = {pid = true, started_at = true, last_heartbeat = true,
                        active_tasks = true, concurrency = true, tasks_processed = true,
                        tasks_failed = true, tasks_retried = true}
local WORKER_OWN = {worker_id = true, id = true, queues = true, heartbeat_age_ms = true,
                    serves = true, pools = true}
local function worker_object(id, h, now)
  local o, queues = {id = id}, {}
  for f, v in pairs(h) do
    if f:sub(1, 2) == 'q:' then
      local q, kind = f:match('^q:(.+):([^:]+)$')
      if q and is_name(q) and valid_name(kind, 64) then
        queues[q] = queues[q] or {}
        queues[q][kind] = int_of(v)
      end
    elseif not WORKER_OWN[f] then
      o[f] = WORKER_NUMBERS[f] and int_of(v) or v
    end
  end
  if h.last_heartbeat then o.heartbeat_age_ms = now - int_of(h.last_heartbeat) end
  o.queues = queues
  if h.serves then -- the queues it serves, in its order (none: a worker older than the field)
    local serves = {}
    for q in h.serves:gmatch('%S+') do
      if is_name(q) then serves[#serves + 1] = q end
    end
    o.serves = arr(serves)
  end
  if h.pools then -- its [pool:*]: "NAME:ready/wanted ..." as {NAME = {ready, wanted}}
    local pools = {}
    for name, ready, wanted in h.pools:gmatch('(%S+):(%d+)/(%d+)') do
      if valid_name(name, 64) then
        pools[name] = {ready = tonumber(ready), wanted = tonumber(wanted)}
      end
    end
    if next(pools) then o.pools = pools end
  end
  return o
end

-- The members of <prefix>:workers, sorted, at most READ.QUEUES_MAX: the live ones as
-- worker objects, how many were left out, and how many have no hash any more (expired).
local function live_workers(now)
  local ids = redis.pcall('SMEMBERS', k('workers'))
  if ids.err then ids = {} end
  table.sort(ids)
  local list, gone = {}, 0
  for i = 1, math.min(#ids, READ.QUEUES_MAX) do
    local h = hgetall_map(k('worker', ids[i])) -- another type reads as gone
    if h then list[#list + 1] = worker_object(ids[i], h, now) else gone = gone + 1 end
  end
  return arr(list), #ids > READ.QUEUES_MAX, gone
end

-- The schedule's size, and per queue its members among the READ.SCHEDULE_SCAN soonest due.
local function scheduled_by_queue()
  local skey = k('retry', 'schedule')
  local scheduled, per = count_of('ZCARD', skey), {}
  local due = redis.pcall('ZRANGE', skey, 0, READ.SCHEDULE_SCAN - 1)
  if due.err then due = {} end
  for _, tid in ipairs(due) do
    local q = redis.pcall('HGET', k('task', tid), 'queue')
    if type(q) == 'string' then per[q] = (per[q] or 0) + 1 end
  end
  return scheduled, per
end

--[[ FCALL_RO <ns>_overview 0: the queues (sorted, at most READ.QUEUES_MAX) with their
counts, the live workers, the scheduler, the dead letters and the events settings. ]]
local function overview(keys, args)
  local now, c = now_ms(), load_config()
  local names = sorted_queues()
  local scheduled, per = scheduled_by_queue()
  local queues = {}
  for i = 1, math.min(#names, READ.QUEUES_MAX) do
    local q = names[i]
    local n = queue_counts(q)
    local d, p = {}, {}
    for band = 0, BANDS - 1 do d[band + 1], p[band + 1] = n.depth_by_band[band], n.pend[band] end
    queues[i] = {name = q, paused = redis.call('EXISTS', k('queue', q, 'paused')) == 1,
                 mode = LEAN.on(q) and 'lean' or 'full',
                 depth = n.depth, pending = n.pending, length = n.length, depth_by_band = d,
                 pending_by_band = p, scheduled = per[q] or 0}
  end
  local wlist, wmore, gone = live_workers(now)
  local leader = redis.pcall('GET', k('lock', 'scheduler'))
  return json_encode({
    time_ms = now, queues = arr(queues), queues_truncated = #names > READ.QUEUES_MAX,
    workers = wlist, workers_truncated = wmore, workers_gone = gone,
    scheduler = {leader = type(leader) == 'string' and leader or cjson.null,
                 scheduled = scheduled, claimed = count_of('ZCARD', k('retry', 'claimed')),
                 by_queue_complete = scheduled <= READ.SCHEDULE_SCAN},
    dlq = {length = count_of('XLEN', k('stream', 'dead-letter'))},
    events = {level = c.events, stream = c.events_stream_maxlen > 0 or
                                         redis.call('EXISTS', k('stream', 'events')) == 1}})
end

-- FCALL_RO <ns>_workers 0: the live workers, as in the overview.
local function workers(keys, args)
  local now = now_ms()
  local list, more, gone = live_workers(now)
  return json_encode({time_ms = now, workers = list, workers_truncated = more,
                      workers_gone = gone})
end

--[[ FCALL_RO <ns>_served 0 <queue>: whether a live worker serves the queue, what a
producer's tool asks after an enqueue (dtqctl warns when none does). Replies {serving,
silent, live}: the live workers (their hash is there: its heartbeat keeps it) whose
`serves` lists the queue, those with no `serves` (older than the field: they may serve it),
and all of them; at most READ.QUEUES_MAX workers are looked at. A {<ns>} call in the
cluster layout. ]]
local function served(keys, args)
  local q = args[1]
  if not is_name(q) then return opt_error('queue name must match ' .. NAME_RULE) end
  local ids = redis.pcall('SMEMBERS', k('workers'))
  if ids.err then ids = {} end
  local serving, silent, live = 0, 0, 0
  for i = 1, math.min(#ids, READ.QUEUES_MAX) do
    local v = redis.pcall('HMGET', k('worker', ids[i]), 'last_heartbeat', 'serves')
    if not v.err and v[1] then
      live = live + 1
      if not v[2] then
        silent = silent + 1
      elseif (' ' .. v[2] .. ' '):find(' ' .. q .. ' ', 1, true) then -- names hold no blank
        serving = serving + 1
      end
    end
  end
  return {serving, silent, live}
end

-- A stream entry of queue `queue`, band `band`, as queue_view lists it: the task fetch
-- would run for it (raw_task_id for a producer's raw entry).
local function entry_item(queue, band, e)
  local m = {}
  for i = 1, #e[2] - 1, 2 do m[e[2][i]] = e[2][i + 1] end -- as process_entry reads them
  local raw = m.task_type ~= nil or m.attempt == nil or m.task_id == nil
  return {band = band, entry_id = e[1], enqueued_ms = id_ms(e[1]), raw = raw,
          task_id = raw and raw_task_id(m, queue, band, e[1]) or m.task_id,
          attempt = m.attempt and int_of(m.attempt) or nil, task_type = m.task_type}
end

-- status, task_type and attempt of a listed item, from its task hash when there is one.
local function item_task(o)
  if not o.task_id then return end
  local v = redis.pcall('HMGET', k('task', o.task_id), 'status', 'task_type', 'attempt')
  if v.err then return end
  if v[1] then o.status = v[1] end
  if v[2] then o.task_type = v[2] end
  if v[3] then o.attempt = int_of(v[3]) end
end

--[[ FCALL_RO <ns>_queue_view 0 <queue> [limit]: a queue's bands (p9 first), what workers
will read next (waiting) and what they hold (running), at most `limit` of each (1-200,
default 20). NOT_FOUND when the queue is not in <prefix>:queues. ]]
local function queue_view(keys, args)
  local q = args[1]
  if not is_name(q) then
    return opt_error('queue name must match ' .. NAME_RULE)
  end
  local bad = SCOPE.refuse(q)
  if bad then return bad end
  local limit = 20
  if args[2] and args[2] ~= '' then
    limit = parse_int(args[2], 1, READ.LIST_MAX)
    if not limit then return opt_error('limit must be an integer in [1, 200]') end
  end
  if redis.pcall('SISMEMBER', k('queues'), q) ~= 1 then
    return redis.error_reply('NOT_FOUND queue ' .. q .. ' is not in ' .. k('queues'))
  end
  local n = queue_counts(q)
  local bands, waiting, running = {}, {}, {}
  for band = BANDS - 1, 0, -1 do
    bands[#bands + 1] = {band = band, length = n.len[band], pending = n.pend[band],
                         depth = n.depth_by_band[band]}
    local s = stream_key(q, band)
    if n.depth_by_band[band] > 0 and #waiting < limit then
      local from = last_delivered(s)
      local page = redis.pcall('XRANGE', s, from and ('(' .. from) or '-', '+', 'COUNT',
                               limit - #waiting)
      if page.err then page = {} end
      for _, e in ipairs(page) do waiting[#waiting + 1] = entry_item(q, band, e) end
    end
    if n.pend[band] > 0 and #running < limit then
      local ok, pend = pcall(redis.call, 'XPENDING', s, GROUP, '-', '+', limit - #running)
      for _, p in ipairs(ok and pend or {}) do
        local o = {band = band, entry_id = p[1], worker_id = p[2], idle_ms = p[3],
                   deliveries = p[4]}
        local e = redis.call('XRANGE', s, p[1], p[1], 'COUNT', 1)[1]
        if e then
          local it = entry_item(q, band, e)
          o.task_id, o.enqueued_ms = it.task_id, it.enqueued_ms
        end
        running[#running + 1] = o
      end
    end
  end
  for _, o in ipairs(waiting) do item_task(o) end
  for _, o in ipairs(running) do item_task(o) end
  return json_encode({name = q, paused = redis.call('EXISTS', k('queue', q, 'paused')) == 1,
                      mode = LEAN.on(q) and 'lean' or 'full', length = n.length, depth = n.depth, pending = n.pending, bands = bands,
                      count = limit, waiting = arr(waiting), running = arr(running)})
end

--[[ FCALL_RO <ns>_task_view 0 <task_id> [events_max]: the task hash (its fields as Redis
holds them, strings), its due time (schedule or claimed set), its result, its dead-letter
entry, and its events from
<prefix>:stream:events, searched from the newest back to its creation, at most events_max
entries (0-10000, default 10000); for a task with `after`, deps: its parents and their
statuses, deps_pending, on_failure, failed_by and the parent_results decoded. NOT_FOUND
when there is no task hash. ]]
local function task_view(keys, args)
  local tid = args[1]
  if not valid_name(tid, 256) then
    return opt_error('task_id must match [A-Za-z0-9._:-]{1,256}')
  end
  local scan_max = READ.SCAN_MAX
  if args[2] and args[2] ~= '' then
    scan_max = parse_int(args[2], 0, READ.SCAN_MAX)
    if not scan_max then return opt_error('events_max must be an integer in [0, 10000]') end
  end
  local tkey = k('task', tid)
  local h, err = hgetall_map(tkey)
  if err then
    return redis.error_reply('NOT_FOUND task ' .. tid .. ': ' .. wrong_type(tkey, 'hash'))
  end
  if not h then return redis.error_reply('NOT_FOUND task ' .. tid) end
  -- updated_at: the latest change, also those written with a time of their own only
  -- (creation, claim, end: docs/reference.md 3.2)
  local upd = math.max(int_of(h.updated_at), int_of(h.created_at), int_of(h.started_at),
                       int_of(h.finished_at))
  if upd > 0 then h.updated_at = fmt(upd) end
  local raws = {}
  local o = {id = tid, status = h.status or '', fields = h, result = cjson.null,
             ttl_ms = redis.call('PTTL', tkey), dead_letter = cjson.null, due_ms = cjson.null,
             due_claimed = false}
  -- due: its score in the schedule; once a scheduler pass took it, the claim time
  local due = redis.pcall('ZSCORE', k('retry', 'schedule'), tid)
  if type(due) ~= 'string' then
    due = redis.pcall('ZSCORE', k('retry', 'claimed'), tid)
    o.due_claimed = type(due) == 'string'
  end
  if type(due) == 'string' then o.due_ms = tonumber(due) end
  local res = redis.pcall('GET', k('result', tid))
  if type(res) == 'string' then
    local v = json_decode(res)
    o.result_is_json = v ~= nil
    if v == nil then
      o.result = res
    elseif json_verbatim(res) then
      raws[1], o.result = res, {[MARK] = 1}
    else
      o.result = v
    end
  end
  if valid_stream_id(h.dlq_entry) then
    local e = redis.pcall('XRANGE', k('stream', 'dead-letter'), h.dlq_entry, h.dlq_entry)
    if not e.err and #e == 1 then
      o.dead_letter = fields_object(e[1][2])
      o.dead_letter.entry_id = e[1][1]
    end
  end
  -- events: newest first, page by page, back to the task's creation or scan_max entries
  local ekey, created = k('stream', 'events'), int_of(h.created_at)
  local events_stream = redis.call('EXISTS', ekey) == 1
  local found, scanned, cursor, full = {}, 0, nil, true
  local needle = '"task_id":' .. cjson.encode(tid)
  while events_stream and full and scanned < scan_max and
        not (cursor and id_ms(cursor) < created) do
    local want = math.min(READ.EVENTS_PAGE, scan_max - scanned)
    local page = redis.pcall('XREVRANGE', ekey, cursor and ('(' .. cursor) or '+', '-',
                             'COUNT', want)
    if page.err then page = {} end
    full = #page == want
    for _, e in ipairs(page) do
      scanned, cursor = scanned + 1, e[1]
      local f = e[2]
      for i = 1, #f - 1, 2 do
        if f[i] == 'event' then
          if f[i + 1]:find(needle, 1, true) then
            local ev = json_decode(f[i + 1])
            if type(ev) == 'table' and ev.task_id == tid then
              ev.stream_id = e[1]
              found[#found + 1] = ev
            end
          end
          break
        end
      end
    end
  end
  local events = {}
  for i = #found, 1, -1 do events[#events + 1] = found[i] end -- oldest first
  o.events, o.events_stream, o.events_scanned = arr(events), events_stream, scanned
  -- the attempt history (history_json), from the hash alone: [] when there is none
  local attempts, hist = {}, type(h.history) == 'string' and json_decode(h.history)
  if type(hist) == 'table' then
    for i = 1, #hist do
      if type(hist[i]) == 'table' then attempts[#attempts + 1] = hist[i] end
    end
  end
  o.attempts = arr(attempts)
  -- dependencies (docs/reference.md 4.4): the parents and where each stands
  if type(h.after) == 'string' then
    local parents = {}
    for pid in h.after:gmatch('[^,]+') do
      local st = redis.pcall('HGET', k('task', pid), 'status')
      parents[#parents + 1] = {id = pid, status = type(st) == 'string' and st or cjson.null}
    end
    o.deps = {parents = arr(parents), pending = int_of(h.deps_pending),
              on_failure = h.on_failure or 'cancel', failed_by = h.failed_by or cjson.null,
              parent_results = type(h.parent_results) == 'string' and
                               json_decode(h.parent_results) or cjson.null,
              parent_results_truncated = h.parent_results_truncated == '1'}
  end
  o.events_complete = not events_stream or not full or
                      (cursor ~= nil and id_ms(cursor) < created)
  return json_encode(o, raws)
end

--[[ One page of a stream for the pagers below, newest or oldest first, after `cursor`
(exclusive; nil: from the end or the start), optionally only the entries whose `field`
equals `value`: pages are read until `count` entries matched, the stream ended, or
READ.SCAN_MAX entries were examined. next_cursor is set only when more may follow. ]]
local function stream_page(key, cursor, count, newest, field, value, cap)
  local size = value and READ.FILTER_PAGE or count + 1 -- one more: is there a next page?
  local entries, matched, scanned, last, next_cursor, done = {}, 0, 0, nil, nil, false
  while not done do
    local from = last or cursor
    local want = math.min(size, READ.SCAN_MAX - scanned + 1)
    local page
    if newest then
      page = redis.pcall('XREVRANGE', key, from and ('(' .. from) or '+', '-', 'COUNT', want)
    else
      page = redis.pcall('XRANGE', key, from and ('(' .. from) or '-', '+', 'COUNT', want)
    end
    if page.err then page = {} end
    for _, e in ipairs(page) do
      if matched == count or scanned == READ.SCAN_MAX then -- more follow: go on from here
        next_cursor, done = last, true
        break
      end
      scanned, last = scanned + 1, e[1]
      local match = not value
      if value then
        for i = 1, #e[2] - 1, 2 do
          if e[2][i] == field then
            match = e[2][i + 1] == value
            break
          end
        end
      end
      if match then
        local o = fields_object(e[2], cap)
        o.entry_id, o.entry_ms = e[1], id_ms(e[1])
        entries[#entries + 1] = o
        matched = matched + 1
      end
    end
    if #page < want then done = true end
  end
  return json_encode({total = count_of('XLEN', key), count = count,
                      order = newest and 'newest' or 'oldest', filter = value or cjson.null,
                      scanned = scanned, entries = arr(entries),
                      next_cursor = next_cursor or cjson.null})
end

-- The arguments of the pagers: <cursor|-> [count [order [filter [field_max]]]].
local function page_args(args, filter_name)
  local cursor, count, newest, value, cap = args[1], 50, true, args[4], READ.FIELD_MAX
  if cursor == nil or cursor == '' or cursor == '-' then
    cursor = nil
  elseif not valid_stream_id(cursor) then
    return nil, opt_error('cursor must be a stream id (<ms>-<seq>) from next_cursor, or -')
  end
  if args[2] and args[2] ~= '' then
    count = parse_int(args[2], 1, READ.PAGE_MAX)
    if not count then return nil, opt_error('count must be an integer in [1, 500]') end
  end
  if args[3] and args[3] ~= '' then
    if args[3] ~= 'newest' and args[3] ~= 'oldest' then
      return nil, opt_error('order must be newest or oldest')
    end
    newest = args[3] == 'newest'
  end
  if value == '' then value = nil end
  if value ~= nil and not valid_name(value, 256) then
    return nil, opt_error(filter_name .. ' must match [A-Za-z0-9._:-]{1,256}')
  end
  if args[5] and args[5] ~= '' then
    cap = parse_int(args[5], 0, 2^31)
    if not cap then return nil, opt_error('field_max must be an integer in [0, 2147483648]') end
    if cap == 0 then cap = nil end
  end
  return {cursor = cursor, count = count, newest = newest, value = value, cap = cap}
end

-- FCALL_RO <ns>_dead_letters 0 <cursor|-> [count [order [class [field_max]]]]
local function dead_letters(keys, args)
  local a, err = page_args(args, 'class')
  if not a then return err end
  return stream_page(k('stream', 'dead-letter'), a.cursor, a.count, a.newest,
                     'last_error_class', a.value, a.cap)
end

-- FCALL_RO <ns>_audit_page 0 <cursor|-> [count [order [task_id [field_max]]]]
local function audit_page(keys, args)
  local a, err = page_args(args, 'task')
  if not a then return err end
  return stream_page(k('stream', 'audit'), a.cursor, a.count, a.newest, 'task_id', a.value,
                     a.cap)
end

--[[ FCALL_RO <ns>_metrics 0: what a Prometheus scrape of dtq-web shows, in one bounded
call (docs/reference.md 5.5): per queue (at most READ.QUEUES_MAX) the depth per band, the
pending count, whether it is paused, the age of its oldest waiting entry and its scheduled
tasks (among the READ.SCHEDULE_SCAN soonest due, as the overview counts them); the dead
letters of the READ.DLQ_SCAN newest entries by queue and class; the live workers by
status; the scheduler's leader. ]]
local function metrics(keys, args)
  local now = now_ms()
  local names = sorted_queues()
  local scheduled, per = scheduled_by_queue()
  local queues = {}
  for i = 1, math.min(#names, READ.QUEUES_MAX) do
    local q = names[i]
    local n = queue_counts(q)
    local d, oldest = {}, nil
    for band = 0, BANDS - 1 do
      d[band + 1] = n.depth_by_band[band]
      if n.depth_by_band[band] > 0 then -- the first entry after the group's last-delivered id
        local s = stream_key(q, band)
        local from = last_delivered(s)
        local e = redis.pcall('XRANGE', s, from and ('(' .. from) or '-', '+', 'COUNT', 1)
        if not e.err and e[1] then
          local ms = id_ms(e[1][1])
          if not oldest or ms < oldest then oldest = ms end
        end
      end
    end
    queues[i] = {name = q, paused = redis.call('EXISTS', k('queue', q, 'paused')) == 1,
                 depth_by_band = d, pending = n.pending, scheduled = per[q] or 0,
                 oldest_waiting_ms = oldest and math.max(0, now - oldest) or 0}
  end
  -- dead letters: the newest READ.DLQ_SCAN entries, read a page at a time
  local dkey, by, dl, scanned, from = k('stream', 'dead-letter'), {}, {}, 0, '+'
  local dlen = count_of('XLEN', dkey)
  while scanned < READ.DLQ_SCAN do
    local page = redis.pcall('XREVRANGE', dkey, from, '-', 'COUNT',
                             math.min(READ.DLQ_PAGE, READ.DLQ_SCAN - scanned))
    if page.err or #page == 0 then break end
    for _, e in ipairs(page) do
      local f = fields_object(e[2])
      local q, c = f.queue or '', f.last_error_class or ''
      local key = q .. '\0' .. c
      if not by[key] then
        by[key] = {queue = q, class = c, count = 0}
        dl[#dl + 1] = by[key]
      end
      by[key].count = by[key].count + 1
      from = '(' .. e[1]
    end
    scanned = scanned + #page
  end
  table.sort(dl, function(a, b)
    if a.queue ~= b.queue then return a.queue < b.queue end
    return a.class < b.class
  end)
  local wlist, wmore, gone = live_workers(now)
  local statuses = {running = 0, draining = 0, stopped = 0}
  for _, w in ipairs(wlist) do
    local st = type(w.status) == 'string' and w.status or ''
    statuses[st] = (statuses[st] or 0) + 1
  end
  local leader = redis.pcall('GET', k('lock', 'scheduler'))
  return json_encode({
    time_ms = now, queues = arr(queues), queues_truncated = #names > READ.QUEUES_MAX,
    scheduled = {total = scheduled, claimed = count_of('ZCARD', k('retry', 'claimed')),
                 by_queue_complete = scheduled <= READ.SCHEDULE_SCAN},
    dead_letters = {length = dlen, scanned = scanned, complete = scanned >= dlen,
                    by_queue_class = arr(dl)},
    workers = statuses, workers_truncated = wmore, workers_gone = gone,
    leader = type(leader) == 'string' and leader or cjson.null})
end

reg('overview', overview, true)
reg('workers', workers, true)
reg('served', served, true)
reg('queue_view', queue_view, true)
reg('task_view', task_view, true)
reg('dead_letters', dead_letters, true)
reg('audit_page', audit_page, true)
reg('metrics', metrics, true)
reg('stats', stats, true)

