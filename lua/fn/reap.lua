-- lua/fn/reap.lua
-- FCALL <ns>_reap, <ns>_recover and <ns>_deregister: lost workers' attempts, a
-- restarted worker's own, and a stopping worker's leave.
local GROUP =
  CONST.GROUP
local fmt, hgetall_map, now_ms =
  util.fmt, util.hgetall_map, util.now_ms
local k =
  scope.k
local reg =
  call.reg
local load_config =
  config.load_config
local decode_policy =
  policy.decode_policy
local raw_task_id =
  raw.raw_task_id
local process_entry =
  claim.process_entry

--[[ Consumers of dead workers are removed from the groups: no pending entry, idle longer
than min_idle_ms, and no live worker hash (its heartbeat expired). XINFO CONSUMERS is
O(consumers), which this pruning itself keeps small. A few dead names are also dropped
from <p>:workers per call. ]]
local function prune_consumers(keys, worker, min_idle)
  for _, stream in ipairs(keys) do
    local info = redis.pcall('XINFO', 'CONSUMERS', stream, GROUP)
    if type(info) == 'table' and not info.err then
      for _, cons in ipairs(info) do
        local f = {}
        for i = 1, #cons, 2 do f[cons[i]] = cons[i + 1] end
        if f.name ~= worker and tonumber(f.pending) == 0 and tonumber(f.idle) > min_idle and
            redis.call('EXISTS', k('worker', f.name)) == 0 then
          redis.call('XGROUP', 'DELCONSUMER', stream, GROUP, f.name)
        end
      end
    end
  end
  for _, w in ipairs(redis.call('SRANDMEMBER', k('workers'), 5)) do
    if redis.call('EXISTS', k('worker', w)) == 0 then redis.call('SREM', k('workers'), w) end
  end
end

--[[ FCALL <ns>_reap numkeys streams... ARGV: worker_id, min_idle_ms, run_slots,
min_count, policy-json, then for each stream its queue name, band and XAUTOCLAIM cursor.
Takes entries idle longer than min_idle_ms from lost workers and adopts or settles them:
up to run_slots adopted tasks are claimed to run here, and at least min_count entries are
examined every call whatever the free slots, the ones beyond run_slots requeued. The
cursors (0-0 to start) carry each stream's scan across calls, so live entries at the
head of a pending list cannot hide lost ones behind them. Returns {claimed-tasks,
next-cursors}, one cursor per stream. ]]
--[[ Whether reaps may adopt yet, as Redis saw the fleet: every reap (each daemon calls one
every visibility_timeout / 2) leaves its time in <p>:reaper. A reap that finds the last one
longer ago than the fleet's shortest visibility timeout / 2 plus 2 s (or none) follows a
time in which no daemon reached Redis: an outage, a stall of Redis, or no daemon running.
Running attempts of live daemons then look idle for as long as it lasted, and their daemons
may not have renewed their claims yet, so nothing is adopted until min_idle after that reap
(`up_since`), whichever daemon asks and however new it is.
The gap is judged by the shortest visibility timeout a reap brought (`short_idle`), not the
caller's: a daemon with a longer one reaps less often, and judged by its own timeout it
would let a stall pass that leaves a shorter-timeout daemon's attempts looking idle, which
that daemon's next reap would then adopt from a live peer. short_idle is renewed by every
reap that brings it (its daemons reap every short_idle / 2) and given up when none has for
twice its value (they left). ]]
local function reap_may_adopt(ms, min_idle)
  local REAP_GAP_SLACK_MS = 2000
  local key = k('reaper')
  local st = redis.pcall('HMGET', key, 'last_reap', 'up_since', 'short_idle', 'short_idle_at')
  if st.err then
    redis.call('DEL', key) -- a key of another type: start over, as after an outage
    st = {}
  end
  local last, up = tonumber(st[1]), tonumber(st[2])
  local short, short_at = tonumber(st[3]), tonumber(st[4])
  if not short or not short_at or min_idle <= short or ms - short_at > 2 * short then
    short, short_at = min_idle, ms
  end
  if not last or not up or ms - last > short / 2 + REAP_GAP_SLACK_MS then up = ms end
  redis.call('HSET', key, 'last_reap', fmt(ms), 'up_since', fmt(up), 'short_idle', fmt(short),
             'short_idle_at', fmt(short_at))
  return ms - up >= min_idle
end

local function reap(keys, args)
  local worker, min_idle = args[1], args[2]
  local run_slots, min_count = tonumber(args[3]), tonumber(args[4])
  local policy = decode_policy(args[5])
  local c = load_config()
  local ms = now_ms()
  if not reap_may_adopt(ms, tonumber(min_idle) or 0) then
    local cursors = {}
    for i = 1, #keys do cursors[i] = args[5 + (i - 1) * 3 + 3] end
    prune_consumers(keys, worker, tonumber(min_idle) or 0)
    return {{}, cursors}
  end
  local claimed, cursors, taken = {}, {}, 0
  local budget = math.max(run_slots, min_count)
  for i, stream in ipairs(keys) do
    local b = 5 + (i - 1) * 3
    local queue, band, cursor = args[b + 1], tonumber(args[b + 2]), args[b + 3]
    cursors[i] = cursor
    if taken < budget then
      local res = redis.pcall('XAUTOCLAIM', stream, GROUP, worker, min_idle, cursor, 'COUNT',
                              budget - taken)
      if type(res) == 'table' and not res.err then
        cursors[i] = res[1]
        for _, e in ipairs(res[2]) do
          if e[2] then
            taken = taken + 1
            local t = process_entry(c, ms, worker, policy, stream, queue, band, e[1], e[2],
                                    #claimed >= run_slots, 'reap')
            if t then claimed[#claimed + 1] = t end
          end
        end
        for _, gone in ipairs(res[3] or {}) do redis.call('XACK', stream, GROUP, gone) end
      end
    end
  end
  prune_consumers(keys, worker, tonumber(min_idle) or 0)
  return {claimed, cursors}
end

--[[ A pending entry of this worker that this process never heard of, because the reply
of the fetch or reap that claimed it was lost: if the claim is still this worker's, it is
handed over again at the same attempt (it never started: the reply never arrived), with
its idle time reset; otherwise the entry is processed like any delivered entry. ]]
local function reclaim_lost(c, ms, worker, policy, stream, queue, band, entry_id, fields, source)
  local f = {}
  for i = 1, #fields, 2 do f[fields[i]] = fields[i + 1] end
  local tid = f.task_id
  if f.task_type ~= nil or f.attempt == nil or tid == nil then
    tid = raw_task_id(f, queue, band, entry_id)
  end
  -- A task key of another type reads as nil here: process_entry quarantines it.
  local h = tid and hgetall_map(k('task', tid))
  if h and h.status == 'running' and h.worker_id == worker and h.carrier == source then
    redis.call('XCLAIM', stream, GROUP, worker, 0, entry_id, 'IDLE', 0, 'JUSTID')
    return {stream, entry_id, tid, h.queue, h.task_type, h.payload or '', tonumber(h.attempt),
            tonumber(h.max_attempts), tonumber(h.timeout_ms)}
  end
  return process_entry(c, ms, worker, policy, stream, queue, band, entry_id, fields, nil, 'lost')
end

--[[ FCALL <ns>_deregister numkeys streams... ARGV: worker_id — a stopping worker leaves:
its consumer is deleted from each group where it holds no pending entry (one that does
keeps it: deleting it would drop those entries), and its name leaves <p>:workers.
Returns the number of groups it left. ]]
local function deregister(keys, args)
  local worker, n = args[1], 0
  for _, stream in ipairs(keys) do
    local pend = redis.pcall('XPENDING', stream, GROUP, '-', '+', 1, worker)
    if type(pend) == 'table' and not pend.err and #pend == 0 then
      redis.call('XGROUP', 'DELCONSUMER', stream, GROUP, worker)
      n = n + 1
    end
  end
  redis.call('SREM', k('workers'), worker)
  return n
end

local RECOVER_MAX = 1000 -- pending entries looked at per stream and call

--[[ FCALL <ns>_recover numkeys streams... ARGV: worker_id, mode, policy-json, nknown,
known... (stream/entry-id of every attempt the daemon runs or holds a result for), then for
each stream its queue name and band. The entries pending for worker_id that are not known:
mode 'lost' (after a reconnect of the same process) hands them over again at the same
attempt (reclaim_lost); mode 'crashed' (a new process with a fixed worker_id, whose
predecessor died) treats them as a lost worker's, at once: adopted (attempt + 1) and
requeued, or dead-lettered when that was the last attempt. Returns claimed tasks. ]]
local function recover(keys, args)
  local worker, mode, policy = args[1], args[2], decode_policy(args[3])
  local nknown = tonumber(args[4]) or 0
  local known = {}
  for i = 1, nknown do known[args[4 + i]] = true end
  local b0 = 4 + nknown
  local c = load_config()
  local ms = now_ms()
  local claimed = {}
  for i, stream in ipairs(keys) do
    local queue, band = args[b0 + 2 * i - 1], tonumber(args[b0 + 2 * i])
    local pend = redis.pcall('XPENDING', stream, GROUP, '-', '+', RECOVER_MAX, worker)
    if type(pend) == 'table' and not pend.err then
      for _, p in ipairs(pend) do
        local id = p[1]
        local source = stream .. '/' .. id
        if not known[source] then
          local e = redis.call('XRANGE', stream, id, id)
          if #e == 0 then
            redis.call('XACK', stream, GROUP, id) -- the entry itself was deleted
          elseif mode == 'lost' then
            local t = reclaim_lost(c, ms, worker, policy, stream, queue, band, id, e[1][2],
                                   source)
            if t then claimed[#claimed + 1] = t end
          else
            process_entry(c, ms, worker, policy, stream, queue, band, id, e[1][2], true,
                          'crashed')
          end
        end
      end
    end
  end
  return claimed
end
reg('reap', reap)
reg('recover', recover)
reg('deregister', deregister)

