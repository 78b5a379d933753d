-- lua/fn/cron.lua
-- Periodic tasks: their schedules and their firing.
local fmt, hgetall_map, is_name, NAME_RULE, now_ms, opt_error, parse_int =
  util.fmt, util.hgetall_map, util.is_name, util.NAME_RULE, util.now_ms, util.opt_error,
  util.parse_int
local SCOPE, k =
  scope.SCOPE, scope.k
local reg =
  call.reg
local enqueue_config =
  config.enqueue_config
local free_task_id, next_seq, seq_incr =
  ids.free_task_id, ids.next_seq, ids.seq_incr
local audit =
  events.audit
local qlen_add, queue_known =
  streams.qlen_add, streams.queue_known
local ENQUEUE_LIMITS, create_task, payload_refusal =
  task.ENQUEUE_LIMITS, task.create_task, task.payload_refusal
local LEAN =
  lean.LEAN
local arr, json_encode =
  view.arr, view.json_encode

--[[ Periodic tasks (docs/reference.md 5.8). A schedule is the hash
<prefix>:cron:<queue>:<name>, with its queue so that it lives where the queue's keys do;
<prefix>:crons (name -> queue) is the index. The Functions own every state change of a
schedule and its firing; what a spec means in time (a time-zone database the Functions do
not have) is computed by the scheduler leader (src/cron.c), which hands the fire times it
found to <ns>_cron_fire. That Function decides which of them run (the catch-up policy) and
enqueues each at most once: a schedule's `last_fire` only grows, and a fire time at or
before it is never enqueued again, whichever leader asks and however often. ]]
local CRON = {
  MAX = 1000,        -- schedules per namespace
  DUE_MAX = 100,     -- schedules one cron_due hands out
  FIRES_MAX = 101,   -- fire times one cron_fire takes (100 missed + the latest)
  CATCH_UP_ALL = 100, -- missed fire times catch-up `all` runs at most
  SPEC_MAX = 256, TZ_MAX = 64, ORIGIN_MAX = 300,
}
local CATCH_UP = {skip = true, none = true, all = true}
local CRON_OPTIONS = {tz = true, catch_up = true, priority = true, max_attempts = true,
                      timeout_ms = true, ttl_seconds = true, origin = true, paused = true}
-- What a schedule's enqueue options are bounded by: enqueue's own bounds.
local CRON_INT = {priority = ENQUEUE_LIMITS.priority, max_attempts = ENQUEUE_LIMITS.max_attempts,
                  timeout_ms = ENQUEUE_LIMITS.timeout_ms, ttl_seconds = ENQUEUE_LIMITS.ttl_seconds}
-- The fields that decide when a schedule fires: changing one replans it.
local CRON_TIMING = {'spec', 'tz'}

local function cron_valid_name(s)
  return type(s) == 'string' and #s >= 1 and #s <= 64 and not s:find('[^%w%._%-]')
end
local function cron_key(queue, name) return k('cron', queue, name) end
local function cron_index() return k('crons') end

-- The schedule `name` as a table, with its key; nil when there is none (an index entry
-- that points at a key that is not this schedule's hash reads as none; cron_set and
-- cron_remove overwrite or drop it).
local function cron_read(name)
  local queue = redis.pcall('HGET', cron_index(), name)
  if type(queue) ~= 'string' then return nil end
  local key = cron_key(queue, name)
  local s = hgetall_map(key)
  if not s or s.name ~= name then return nil end
  return s, key
end

local function cron_not_found(name)
  return redis.error_reply('NOT_FOUND no periodic schedule named ' .. tostring(name))
end

--[[ FCALL <ns>_cron_set 0 <actor> <name> <spec> <queue> <task_type> <payload-json>
[option value]... Options: tz (IANA name, default UTC), catch_up (skip|none|all, default
skip), priority, max_attempts, timeout_ms, ttl_seconds, origin (who defines it: `runtime`
by default, `config:...` for a daemon's config file), paused (0|1). Creates or replaces
the schedule `name`; a replaced schedule keeps its paused state unless `paused` is given,
and its last fire time always (a fire time it has run is never run again). Its fire times
are (re)planned by the leader when spec or tz change. The spec and zone are checked by
dtqctl and dtq-worker before they call, and by the leader when it plans (a schedule it
cannot plan records `error` and does not fire). Replies created, replaced or unchanged. ]]
local function cron_set(keys, args)
  local actor, name, spec, queue, ttype, payload = args[1], args[2], args[3],
    args[4], args[5], args[6]
  if not cron_valid_name(name) then return opt_error('name must match [A-Za-z0-9._-]{1,64}') end
  if type(spec) ~= 'string' or #spec < 1 or #spec > CRON.SPEC_MAX or spec:find('[%c]') then
    return opt_error('spec must be 1-' .. fmt(CRON.SPEC_MAX) .. ' printable bytes')
  end
  if not is_name(queue) then return opt_error('queue name must match ' .. NAME_RULE) end
  if not is_name(ttype) then return opt_error('task_type must match ' .. NAME_RULE) end
  if payload == nil then return opt_error('payload is required') end
  local bad = SCOPE.refuse(queue)
  if bad then return bad end
  local c = enqueue_config()
  local refusal = payload_refusal(c, payload)
  if refusal then return refusal end
  local o = {tz = 'UTC', catch_up = 'skip', origin = 'runtime'}
  if (#args - 6) % 2 ~= 0 then return opt_error('options come in name value pairs') end
  for i = 7, #args, 2 do
    local opt, v = args[i], args[i + 1]
    if not CRON_OPTIONS[opt] then return opt_error('unknown option ' .. opt) end
    if CRON_INT[opt] then
      local lim = CRON_INT[opt]
      if not parse_int(v, lim[1], lim[2]) then
        return opt_error(opt .. ' must be an integer in [' .. fmt(lim[1]) .. ', ' .. fmt(lim[2]) .. ']')
      end
    elseif opt == 'tz' then
      if #v < 1 or #v > CRON.TZ_MAX or v:find('[^%w/_+%-]') or v:find('%.%.') then
        return opt_error('tz must be an IANA time zone name such as Europe/Berlin')
      end
    elseif opt == 'catch_up' then
      if not CATCH_UP[v] then return opt_error('catch_up must be skip, none or all') end
    elseif opt == 'origin' then
      if #v < 1 or #v > CRON.ORIGIN_MAX or v:find('[%c]') then
        return opt_error('origin must be 1-' .. fmt(CRON.ORIGIN_MAX) .. ' printable bytes')
      end
    elseif opt == 'paused' then
      if v ~= '0' and v ~= '1' then return opt_error('paused must be 0 or 1') end
    end
    o[opt] = v
  end
  local ms = now_ms()
  local old, oldkey = cron_read(name)
  if not old and redis.call('HLEN', cron_index()) >= CRON.MAX then
    return opt_error('at most ' .. fmt(CRON.MAX) .. ' periodic schedules per namespace')
  end
  local s = {name = name, spec = spec, tz = o.tz, queue = queue, task_type = ttype,
             payload = payload, catch_up = o.catch_up, origin = o.origin,
             priority = o.priority or '', max_attempts = o.max_attempts or '',
             timeout_ms = o.timeout_ms or '', ttl_seconds = o.ttl_seconds or ''}
  local verdict = 'created'
  if old then
    verdict = 'unchanged'
    for f, v in pairs(s) do
      if old[f] ~= v then verdict = 'replaced' end
    end
    if o.paused and o.paused ~= old.paused then verdict = 'replaced' end
    if verdict == 'unchanged' then
      -- Setting a schedule again clears the error a leader recorded (the cause may have
      -- been fixed outside the schedule: a zone the hosts now know): it is planned afresh.
      if (old.error or '') ~= '' then
        redis.call('HSET', oldkey, 'error', '', 'next_fire', '', 'gen', fmt(seq_incr(1)),
                   'updated_at', fmt(now_ms()))
      end
      return verdict
    end
    s.paused = o.paused or old.paused or '0'
    s.last_fire, s.last_task_id = old.last_fire or '', old.last_task_id or ''
    s.created_at = old.created_at or fmt(ms)
    local replan = old.queue ~= queue or (old.paused == '1' and s.paused == '0')
    for _, f in ipairs(CRON_TIMING) do
      if old[f] ~= s[f] then replan = true end
    end
    if replan then
      s.anchor_ms, s.next_fire, s.gen = fmt(ms), '', fmt(seq_incr(1))
    else
      s.anchor_ms, s.next_fire = old.anchor_ms or fmt(ms), old.next_fire or ''
      s.gen = old.gen or '1'
    end
    if old.queue ~= queue then redis.call('DEL', oldkey) end
  else
    s.paused, s.last_fire, s.last_task_id = o.paused or '0', '', ''
    -- gen comes from the namespace's counter: a schedule removed and set again never
    -- takes a generation an old leader's cron_fire still carries.
    s.created_at, s.anchor_ms, s.next_fire, s.gen = fmt(ms), fmt(ms), '', fmt(seq_incr(1))
  end
  s.updated_at, s.error = fmt(ms), ''
  local flat = {}
  for f, v in pairs(s) do
    flat[#flat + 1] = f
    flat[#flat + 1] = v
  end
  local key = cron_key(queue, name)
  redis.call('DEL', key) -- a replaced schedule keeps nothing it did not copy above
  redis.call('HSET', key, unpack(flat))
  redis.call('HSET', cron_index(), name, queue)
  audit('cron_set', '', actor, ms, queue, {'name', name, 'result', verdict})
  return verdict
end

local function cron_remove_one(name)
  local s, key = cron_read(name)
  redis.call('HDEL', cron_index(), name)
  if not s then return nil end
  redis.call('DEL', key)
  return s
end

-- FCALL <ns>_cron_remove 0 <actor> <name>: 1, or NOT_FOUND.
local function cron_remove(keys, args)
  local s = cron_remove_one(args[2])
  if not s then return cron_not_found(args[2]) end
  audit('cron_remove', '', args[1], now_ms(), s.queue, {'name', s.name})
  return 1
end

--[[ FCALL <ns>_cron_pause|_cron_resume 0 <actor> <name>: 1 (changed) or 0 (it was so
already), or NOT_FOUND. A resumed schedule is planned again from now: the fire times that
passed while it was paused are not caught up. ]]
local function cron_pause_resume(action, args)
  local s, key = cron_read(args[2])
  if not s then return cron_not_found(args[2]) end
  local want = action == 'cron_pause' and '1' or '0'
  if s.paused == want then return 0 end
  local ms = now_ms()
  if want == '0' then
    redis.call('HSET', key, 'paused', '0', 'next_fire', '', 'anchor_ms', fmt(ms), 'gen',
               fmt(seq_incr(1)), 'updated_at', fmt(ms))
  else
    redis.call('HSET', key, 'paused', '1', 'updated_at', fmt(ms))
  end
  audit(action, '', args[1], ms, s.queue, {'name', s.name})
  return 1
end
local function cron_pause(keys, args) return cron_pause_resume('cron_pause', args) end
local function cron_resume(keys, args) return cron_pause_resume('cron_resume', args) end

-- The schedule's task for fire time `fire`: a new task of its queue, with `cron` and
-- `fire_time` in its hash. Returns its id, or nil and the refusal (QUEUE_FULL).
local function cron_enqueue(s, ms, fire)
  local c = enqueue_config()
  local depth, lean = LEAN.depth_mode(s.queue)
  if depth >= c.max_queue_depth then return nil, 'QUEUE_FULL' end
  local o = {priority = tonumber(s.priority) or c.default_priority,
             max_attempts = tonumber(s.max_attempts), timeout_ms = tonumber(s.timeout_ms),
             ttl_seconds = tonumber(s.ttl_seconds)}
  if lean then -- a lean task: its entry alone (no cron nor fire_time recorded with it)
    local tid = LEAN.add(c, ms, s.queue, s.task_type, s.payload, o)
    qlen_add(s.queue, 1)
    queue_known(s.queue)
    return tid
  end
  local tid, tkey = free_task_id(ms, fmt(ms) .. '-' .. next_seq())
  if not tid then return nil, 'ID_EXISTS' end
  tkey = tkey or k('task', tid)
  -- cron and fire_time first: create_task's entry is written last, so no worker can read
  -- the task before they are there.
  redis.call('HSET', tkey, 'cron', s.name, 'fire_time', fmt(fire))
  qlen_add(s.queue, create_task(c, ms, tid, s.queue, s.task_type, s.payload, o, tkey))
  queue_known(s.queue)
  return tid
end

-- FCALL <ns>_cron_run 0 <actor> <name>: enqueues the schedule's task now, outside its
-- fire times (fire_time = now; last_fire is not moved). Replies the task id.
local function cron_run(keys, args)
  local s, key = cron_read(args[2])
  if not s then return cron_not_found(args[2]) end
  local ms = now_ms()
  local tid, refusal = cron_enqueue(s, ms, ms)
  if not tid then
    return redis.error_reply(refusal .. ' periodic task ' .. s.name .. ' not enqueued into ' .. s.queue)
  end
  redis.call('HSET', key, 'last_task_id', tid)
  audit('cron_run', tid, args[1], ms, s.queue, {'name', s.name})
  return tid
end

-- The fields of a schedule as the read side shows them.
local function cron_item(s)
  local function int(v) return tonumber(v) or cjson.null end
  local function str(v) if v == nil or v == '' then return cjson.null end return v end
  return {name = s.name, spec = s.spec, tz = s.tz, queue = s.queue, task_type = s.task_type,
          payload = s.payload, catch_up = s.catch_up, paused = s.paused == '1',
          priority = int(s.priority), max_attempts = int(s.max_attempts),
          timeout_ms = int(s.timeout_ms), ttl_seconds = int(s.ttl_seconds),
          next_fire_ms = int(s.next_fire), last_fire_ms = int(s.last_fire),
          last_task_id = str(s.last_task_id), origin = s.origin, error = str(s.error),
          last_refusal = str(s.last_refusal), created_at = int(s.created_at),
          updated_at = int(s.updated_at)}
end

-- The schedules, by name (at most CRON.MAX: cron_set refuses more).
local function cron_all()
  local idx = redis.pcall('HGETALL', cron_index())
  local out = {}
  if type(idx) ~= 'table' or idx.err then return out end
  local names = {}
  for i = 1, #idx, 2 do names[#names + 1] = idx[i] end
  table.sort(names)
  for _, name in ipairs(names) do
    local s = cron_read(name)
    if s then out[#out + 1] = s end
  end
  return out
end

--[[ FCALL_RO <ns>_cron_list 0 [name]: one JSON text, {"now_ms":..., "schedules":[...]}
(every schedule, or the one named: NOT_FOUND when none), each with its spec, zone, queue,
task type, payload, options, catch_up, paused, next_fire_ms, last_fire_ms, last_task_id,
origin and error (null when it plans fine). ]]
local function cron_list(keys, args)
  local list = {}
  if args[1] and args[1] ~= '' then
    local s = cron_read(args[1])
    if not s then return cron_not_found(args[1]) end
    list[1] = cron_item(s)
  else
    for _, s in ipairs(cron_all()) do list[#list + 1] = cron_item(s) end
  end
  return json_encode({now_ms = now_ms(), schedules = arr(list)})
end

--[[ FCALL_RO <ns>_cron_due 0: what the leader has to plan or fire now. Replies {now_ms,
next_ms, more, fires_max, schedule...}: next_ms the earliest planned fire time after now
('' when none), so the leader can wake then; more 1 when there were more due schedules
than one reply holds (CRON.DUE_MAX: ask again at once); fires_max the fire times one
cron_fire takes; each schedule (not paused, without an error, unplanned or due) a flat
array {name, queue, gen, spec, tz, anchor_ms, next_fire} (next_fire '' when unplanned). ]]
local function cron_due(keys, args)
  local ms = now_ms()
  local out, soonest = {fmt(ms), '', 0, CRON.FIRES_MAX}, nil
  for _, s in ipairs(cron_all()) do
    if s.paused ~= '1' and (s.error or '') == '' then
      local nf = tonumber(s.next_fire)
      if not nf or nf <= ms then
        if #out - 4 < CRON.DUE_MAX then
          out[#out + 1] = {s.name, s.queue, s.gen or '0', s.spec, s.tz, s.anchor_ms or fmt(ms),
                           s.next_fire or ''}
        else
          out[3] = 1
        end
      elseif not soonest or nf < soonest then
        soonest = nf
      end
    end
  end
  if soonest then out[2] = fmt(soonest) end
  return out
end

--[[ FCALL <ns>_cron_fire 0 <worker_id> <name> <queue> <gen> <grace_ms> <next_ms> <error>
[fire_ms...]. The leader's verdict on one schedule it got from cron_due: the fire times it
found due (ascending, at most CRON.FIRES_MAX, each at or before now) and the first one
after them (next_ms), or an error (the spec or zone cannot be planned: recorded, nothing
fires until the schedule is set again). Nothing happens if the schedule changed since
(`gen`), was paused or removed. A fire time at most grace_ms old is on time and runs; an
older one was missed (no leader ran then) and the catch-up policy decides: skip runs the
latest missed one, none none, all each (the latest CRON.CATCH_UP_ALL). A fire time at or
before last_fire has run already and is never enqueued again. Replies {fired, missed
dropped, refused (the queue was full: recorded in last_refusal), last task id or ''}. ]]
local function cron_fire(keys, args)
  local name, queue, gen, grace = args[2], args[3], args[4], tonumber(args[5])
  local next_ms, err = args[6], args[7]
  local bad = SCOPE.refuse(queue)
  if bad then return bad end
  local key = cron_key(queue or '', name or '')
  local s = hgetall_map(key)
  if not s or s.name ~= name or s.gen ~= gen or s.paused == '1' or not grace then
    return {0, 0, 0, ''}
  end
  local ms = now_ms()
  if err and err ~= '' then
    redis.call('HSET', key, 'error', err, 'next_fire', '')
    return {0, 0, 0, ''}
  end
  if #args - 7 > CRON.FIRES_MAX then return opt_error('at most ' .. fmt(CRON.FIRES_MAX) .. ' fire times') end
  local last = tonumber(s.last_fire) or -1
  local on_time, missed = {}, {}
  local newest = last
  for i = 8, #args do
    local f = tonumber(args[i])
    if not f or f ~= math.floor(f) then return opt_error('fire times must be integers') end
    if f > ms then
      -- Never early, whatever the caller's clock says (Redis's may have stepped back, on
      -- a failover): this one is the next fire time, not lost.
      next_ms = fmt(f)
      break
    end
    if f > last then
      if ms - f <= grace then on_time[#on_time + 1] = f else missed[#missed + 1] = f end
      if f > newest then newest = f end
    end
  end
  local run = {}
  if s.catch_up == 'all' then
    for i = math.max(1, #missed - CRON.CATCH_UP_ALL + 1), #missed do run[#run + 1] = missed[i] end
  elseif s.catch_up == 'skip' and #missed > 0 then
    -- Of the missed fire times only the latest runs (the ones on time run as usual).
    run[1] = missed[#missed]
  end
  local dropped = #missed
  for _, f in ipairs(run) do dropped = dropped - 1 end
  for _, f in ipairs(on_time) do run[#run + 1] = f end
  local fired, refused, last_tid = 0, 0, ''
  for _, f in ipairs(run) do
    local tid, refusal = cron_enqueue(s, ms, f)
    if tid then
      fired, last_tid = fired + 1, tid
    else
      refused = refused + 1
      redis.call('HSET', key, 'last_refusal', refusal .. ' at fire time ' .. fmt(f))
    end
  end
  local upd = {'next_fire', (tonumber(next_ms) and next_ms) or ''}
  if newest > last then
    upd[#upd + 1], upd[#upd + 2] = 'last_fire', fmt(newest)
  end
  if last_tid ~= '' then
    upd[#upd + 1], upd[#upd + 2] = 'last_task_id', last_tid
    if refused == 0 and (s.last_refusal or '') ~= '' then
      upd[#upd + 1], upd[#upd + 2] = 'last_refusal', ''
    end
  end
  redis.call('HSET', key, unpack(upd))
  return {fired, dropped, refused, last_tid}
end

--[[ FCALL <ns>_cron_sync 0 <actor> <origin> [name...]: the schedules of `origin` (a
daemon's config file) that are not named are removed; schedules of any other origin
(runtime ones, another file's) are kept. Replies the number removed. ]]
local function cron_sync(keys, args)
  local actor, origin = args[1], args[2]
  if type(origin) ~= 'string' or origin == '' then return opt_error('origin is required') end
  local keep = {}
  for i = 3, #args do keep[args[i]] = true end
  local removed, ms = 0, now_ms()
  for _, s in ipairs(cron_all()) do
    if s.origin == origin and not keep[s.name] then
      cron_remove_one(s.name)
      audit('cron_remove', '', actor, ms, s.queue, {'name', s.name, 'origin', origin})
      removed = removed + 1
    end
  end
  return removed
end

reg('cron_set', cron_set)
reg('cron_remove', cron_remove)
reg('cron_pause', cron_pause)
reg('cron_resume', cron_resume)
reg('cron_run', cron_run)
reg('cron_list', cron_list, true)
reg('cron_due', cron_due, true)
reg('cron_fire', cron_fire)
reg('cron_sync', cron_sync)

