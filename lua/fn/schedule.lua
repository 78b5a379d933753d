-- lua/fn/schedule.lua
-- FCALL <ns>_sched_claim, <ns>_sched_promote, <ns>_lock_refresh and <ns>_lock_release:
-- the scheduler leader's pass and its lock.
local fmt, now_ms =
  util.fmt, util.now_ms
local reg =
  call.reg
local load_config =
  config.load_config
local promote_one =
  schedule.promote_one

--[[ Scheduler. FCALL <ns>_sched_claim 2 <schedule> <claimed> <batch> <claim_timeout_ms>
Returns stale claims to the schedule (due now), then moves up to `batch` due members from
the schedule to the claimed set, scored with the claim time. Replies with the claimed ids,
then four more elements that the pass renders (its gauges, its next wake-up): the schedule's
and the claimed set's sizes as the call found them (before its moves, so the claimed size
counts the claims earlier passes left, never this one's, which its promote removes), the
schedule's soonest due time after the moves (epoch ms; nil when empty) and the Redis time
the claim used (epoch ms). The ids are strings, the four integers (or nil): the last four
elements are always these.
`batch` is at most SCHED_CLAIM_MAX, whatever the caller passes. ]]
local SCHED_CLAIM_MAX = 10000

local function sched_claim(keys, args)
  local batch = math.max(1, math.min(tonumber(args[1]) or 1, SCHED_CLAIM_MAX))
  local claim_timeout = tonumber(args[2])
  local ms = now_ms()
  local scheduled, claimed = redis.call('ZCARD', keys[1]), redis.call('ZCARD', keys[2])
  local stale = redis.call('ZRANGEBYSCORE', keys[2], '-inf', fmt(ms - claim_timeout), 'LIMIT',
                           0, batch)
  for _, id in ipairs(stale) do
    redis.call('ZREM', keys[2], id)
    redis.call('ZADD', keys[1], fmt(ms), id)
  end
  local due = redis.call('ZRANGEBYSCORE', keys[1], '-inf', fmt(ms), 'LIMIT', 0, batch)
  for _, id in ipairs(due) do
    redis.call('ZREM', keys[1], id)
    redis.call('ZADD', keys[2], fmt(ms), id)
  end
  local soonest = redis.call('ZRANGE', keys[1], 0, 0, 'WITHSCORES')
  local n = #due
  due[n + 1], due[n + 2] = scheduled, claimed
  due[n + 3] = soonest[2] and math.floor(tonumber(soonest[2])) or false
  due[n + 4] = ms
  return due
end

--[[ FCALL <ns>_sched_promote 1 <claimed> <worker_id> id... — enqueues claimed tasks
(promote_one), each claim removed after its entry is written. Returns the number of
entries written. ]]
local function sched_promote(keys, args)
  local worker = args[1]
  local c = load_config()
  local ms = now_ms()
  local moved = 0
  for i = 2, #args do
    local tid = args[i]
    if promote_one(c, ms, worker, tid, NS .. '_sched_promote') == 'queued' then
      moved = moved + 1
    end
    redis.call('ZREM', keys[1], tid)
  end
  return moved
end

-- FCALL <ns>_lock_refresh 1 <lock> <worker_id> <ms>: compare-and-pexpire.
local function lock_refresh(keys, args)
  if redis.call('GET', keys[1]) == args[1] then
    redis.call('PEXPIRE', keys[1], args[2])
    return 1
  end
  return 0
end

-- FCALL <ns>_lock_release 1 <lock> <worker_id>: compare-and-delete.
local function lock_release(keys, args)
  if redis.call('GET', keys[1]) == args[1] then
    redis.call('DEL', keys[1])
    return 1
  end
  return 0
end
reg('sched_claim', sched_claim)
reg('sched_promote', sched_promote)
reg('lock_refresh', lock_refresh)
reg('lock_release', lock_release)

