-- lua/lib/unique.lua
-- Unique jobs (docs/reference.md 4.7): the options unique_for, unique_key and unique_mode of
-- <ns>_enqueue, the lock that holds a key, and its release at the mode's point.
local fmt, parse_int =
  util.fmt, util.parse_int
local k =
  scope.k
local emit_task =
  events.emit_task

--[[ The lock of a key is <prefix>:unique:<queue>:<key> (lock_key: the one place its name is
spelled): a string '<mode>:<task id>' naming the task that holds the key, EX unique_for. That
task keeps unique_key and unique_mode in its hash, and gives the lock back (DEL, only while
the lock still names it: UNIQUE.release) at its mode's release point: until_started at a
claim (lib/claim.lua), debounce when the schedule queues it (lib/schedule.lua), every mode
at its terminal end (task.finish_terminal, and the two success paths of <ns>_finish). A
window that runs out first ends the uniqueness (the TTL). So a lock exists only while its
task has not passed its release point; an enqueue finds it stale only when the task's hash
is gone. The enqueue reads the lock, the existence of the task's key and, for a debounce,
the task's schedule entry (ZADD XX INCR 0: a producer may write task hashes and the
schedule, not read them; docs/reference.md 17), never the hash itself. ]]
local UNIQUE = {FOR_MAX = 2592000, -- 30 days
                OPTIONS = {unique_for = true, unique_key = true, unique_mode = true},
                MODES = {until_started = true, until_finished = true, debounce = true}}

local function lock_key(queue, key) return k('unique', queue, key) end

-- Reads option `name` (one of UNIQUE.OPTIONS) into o; nil, or the refusal's text.
function UNIQUE.option(o, name, v)
  if name == 'unique_for' then
    local n = parse_int(v, 1, UNIQUE.FOR_MAX)
    if not n then return 'unique_for must be an integer in [1, ' .. fmt(UNIQUE.FOR_MAX) .. ']' end
    o.unique_for = n
  elseif name == 'unique_key' then
    if #v < 1 or #v > 256 then return 'unique_key must be 1-256 bytes' end
    o.unique_key = v
  else
    if not UNIQUE.MODES[v] then
      return 'unique_mode must be until_started, until_finished or debounce'
    end
    o.unique_mode = v
  end
  return nil
end

-- The checks between the options once all are read: the mode's default, and a debounce's
-- delay (its window). nil, or the refusal's text.
function UNIQUE.settle(o)
  if not o.unique_for then
    if o.unique_key or o.unique_mode then
      return (o.unique_key and 'unique_key' or 'unique_mode') .. ' needs unique_for'
    end
    return nil
  end
  o.unique_mode = o.unique_mode or 'until_finished'
  if o.unique_mode == 'debounce' then
    if o.delay_ms then
      return 'delay_ms is refused with unique_mode debounce (unique_for is its delay)'
    end
    if o.after then
      return 'unique_mode debounce is refused with after (a waiting task is in no schedule)'
    end
    o.delay_ms = o.unique_for * 1000
  end
  return nil
end

--[[ Before the task is created: its key (unique_key, or the task type and the SHA1 of the
payload) and that key's lock. Returns the reply when a task holds the key: {id, 'duplicate'},
or {id, 'debounced'} when this debounce enqueue replaced the payload of the debounce task
that holds it and pushed its due time (the task still in the schedule); otherwise nil and the
lock's name, for UNIQUE.take once the task exists. ]]
function UNIQUE.check(c, ms, queue, ttype, payload, o)
  o.unique_key = o.unique_key or (ttype .. ':' .. redis.sha1hex(payload))
  local lock = lock_key(queue, o.unique_key)
  local held = redis.pcall('GET', lock)
  local sep = type(held) == 'string' and held:find(':', 1, true)
  if not sep then return nil, lock end
  local tid = held:sub(sep + 1)
  local tkey = k('task', tid)
  if redis.call('EXISTS', tkey) == 0 then return nil, lock end -- stale: its task is gone
  if o.unique_mode == 'debounce' and held:sub(1, sep - 1) == 'debounce' then
    local sched = k('retry', 'schedule')
    if redis.call('ZADD', sched, 'XX', 'INCR', '0', tid) then -- still in the schedule
      local due = ms + o.delay_ms
      redis.call('HSET', tkey, 'payload', payload, 'updated_at', fmt(ms))
      redis.call('ZADD', sched, 'XX', fmt(due), tid)
      redis.call('SET', lock, held, 'EX', fmt(o.unique_for))
      emit_task(c, ms, 'TASK_DEBOUNCED', tid, queue, ttype, 1, '', {due_ms = due})
      return {tid, 'debounced'}
    end
  end
  return {tid, 'duplicate'}
end

-- The new task `tid` takes the key (`lock` from UNIQUE.check). The window of a delayed task
-- counts from its due time (a debounce's delay is its window).
function UNIQUE.take(lock, tkey, tid, o)
  local ttl = o.unique_for
  if o.delay_ms and o.unique_mode ~= 'debounce' then ttl = ttl + math.ceil(o.delay_ms / 1000) end
  redis.call('SET', lock, o.unique_mode .. ':' .. tid, 'EX', fmt(ttl))
  redis.call('HSET', tkey, 'unique_key', o.unique_key, 'unique_mode', o.unique_mode)
end

-- Gives the lock of `key` in `queue` back when it still names task `tid`.
function UNIQUE.release(queue, key, tid)
  local lock = lock_key(queue or '', key)
  local v = redis.pcall('GET', lock)
  local sep = type(v) == 'string' and v:find(':', 1, true)
  if sep and v:sub(sep + 1) == tid then redis.call('DEL', lock) end
end

return {UNIQUE = UNIQUE}
