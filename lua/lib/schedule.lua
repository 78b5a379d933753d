-- lua/lib/schedule.lua
-- The schedule's promotion of one task (scheduler and <ns>_sched_run_now).
local TERMINAL =
  CONST.TERMINAL
local fmt =
  util.fmt
local k =
  scope.k
local emit =
  events.emit
local add_entry, queue_known =
  streams.add_entry, streams.queue_known
local dead_letter_poisoned, finish_terminal, in_cancelled, quarantine, read_task, task_poison =
  task.dead_letter_poisoned, task.finish_terminal, task.in_cancelled, task.quarantine,
  task.read_task, task.task_poison
local UNIQUE =
  unique.UNIQUE

--[[ One task the scheduler (or <ns>_sched_run_now) takes out of the schedule, by its hash:
gone/terminal -> drop; cancelled -> cancelled; TTL passed -> expired; already queued ->
drop without XADD (an earlier pass got that far); retrying -> attempt+1, queued, XADD,
TASK_RETRIED; pending -> queued, XADD, TASK_QUEUED (`meta`: the event's metadata). A hash
task_poison() refuses is dead-lettered; a task key of another type is quarantined (source:
`source`). Returns 'queued', the terminal status it ended in, or 'gone', 'quarantined',
'dropped'. A queued task's queue is added to <prefix>:queues again (it may have been
removed while the task waited). ]]
local function promote_one(c, ms, worker, tid, source, meta)
  local tkey = k('task', tid)
  local h, bad = read_task(tkey, tid)
  if bad then
    quarantine(bad, tkey, source, ms)
    return 'quarantined'
  end
  if not h then return 'gone' end
  if TERMINAL[h.status] then return 'dropped' end
  local why = task_poison(h)
  if why then return dead_letter_poisoned(c, tkey, h, ms, why, worker) end
  local ttl = tonumber(h.ttl_seconds)
  if in_cancelled(tid) then
    redis.pcall('SREM', k('cancelled'), tid)
    finish_terminal(c, tkey, h, 'cancelled', ms)
    emit(c, ms, 'TASK_CANCELLED', h, worker)
    return 'cancelled'
  elseif (h.status == 'pending' or h.status == 'queued') and ttl and
         ms >= tonumber(h.created_at) + ttl * 1000 then
    finish_terminal(c, tkey, h, 'expired', ms)
    emit(c, ms, 'TASK_EXPIRED', h, worker)
    return 'expired'
  elseif h.status == 'retrying' or h.status == 'pending' then
    local etype = 'TASK_QUEUED'
    if h.status == 'retrying' then
      h.attempt = fmt(tonumber(h.attempt) + 1)
      etype = 'TASK_RETRIED'
    end
    redis.call('HSET', tkey, 'status', 'queued', 'attempt', h.attempt, 'updated_at', fmt(ms))
    add_entry(h, tid)
    queue_known(h.queue)
    if h.unique_mode == 'debounce' and h.unique_key then -- its window is over (lib/unique.lua)
      UNIQUE.release(h.queue, h.unique_key, tid)
    end
    emit(c, ms, etype, h, worker, meta)
    return 'queued'
  end
  return 'dropped'
end

return {promote_one = promote_one}
