-- lua/lib/ids.lua
-- Numbers and ids: <prefix>:seq and task ids that no task holds.
local fmt =
  util.fmt
local k =
  scope.k

-- A fresh value of <prefix>:seq. The first one a call takes also numbers its events.
--[[ <p>:seq after INCRBY by; a value that is not an integer, or a key of another type
(what a producer, who holds SET on it, could leave there) is replaced, so no producer can
stop the others' enqueues. ]]
local function seq_incr(by)
  local n = by == 1 and redis.pcall('INCR', k('seq')) or redis.pcall('INCRBY', k('seq'), by)
  if type(n) == 'table' then
    redis.call('SET', k('seq'), by)
    n = by
  end
  return n
end

local function next_seq()
  local n = fmt(seq_incr(1))
  local cx = call.ctx
  if not cx.seq then cx.seq = n end
  return n
end

--[[ A minted task id that no task holds. <p>:seq only grows through INCR/INCRBY, but a
producer holds those (a Function runs with its caller's permissions) and INCRBY takes a
negative step: a rewound counter would mint an id that is taken and overwrite that task.
So a taken id is never used: the counter is stepped on until a free id comes (a bounded
number of times; after that the enqueue is refused with ID_EXISTS, nothing overwritten). ]]
local function free_task_id(ms, tid)
  local MINT_TRIES = 1000
  for _ = 1, MINT_TRIES do
    local tkey = k('task', tid)
    if redis.call('EXISTS', tkey) == 0 then return tid, tkey end
    tid = fmt(ms) .. '-' .. next_seq()
  end
  return nil
end

return {free_task_id = free_task_id, next_seq = next_seq, seq_incr = seq_incr}
