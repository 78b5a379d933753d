--[[ The wrapper of every Function, and the call's context. call.reg(name, fn, ro)
registers <ns>_<name>; each call makes call.ctx afresh, the one place per-call state lives:
  seq           the call's first value of <prefix>:seq (ids, event ids), nil until taken
  events        the events built so far (their ids' last part)
  eid_prefix    the event ids' common part, once the first event is built
  listeners     whether anyone can receive an event (looked up once, by the first event)
  any_cancelled whether <prefix>:cancelled holds anything (nil: not asked yet)
  limits        the queues' limits read so far (LIM.of), by queue
  limit_state   what the call read or wrote of the limits' state (lib/limits.lua)
  lean_modes    the queues' modes read so far (LEAN.on), by queue
  lean_policy   the policy a finish call's lean section carries
  ended         the ends of tasks that have waiters, flat (task id, status), with ended_c
                and ended_ms the config and clock of the call: settled once the Function has run (M.settle, set
                by lib/deps.lua: task dependencies)
  batch_ends    the ends of batch members, flat (batch id, task id, status), with batch_ms:
                counted once the dependencies are settled (M.settle_batches, set by
                lib/batch.lua)
The tables among them (limits, limit_state, lean_modes) are made by the first use
(call.sub): a call is one table until it needs more, which the garbage collector notices
(bench/fn_cost.sh CALLGRIND=1: four tables a call cost a single enqueue 3% more). Then the
scope is set from the call's keys (scope.enter) before the Function runs. ]]
local SCOPE =
  scope.SCOPE

local M = {ctx = nil, settle = nil, settle_batches = nil}

-- The call's table `name` of call.ctx, made by its first use.
function M.sub(name)
  local cx = M.ctx
  local t = cx[name]
  if not t then
    t = {}
    cx[name] = t
  end
  return t
end

function M.reg(name, fn, ro)
  local wrapped = function(keys, args)
    M.ctx = {events = 0}
    local bad = SCOPE.enter(keys)
    if bad then return redis.error_reply(bad) end
    if SCOPE.cluster then
      -- The slot being moved (resharding): a node that is not the slot's owner runs the
      -- call only after ASKING, while the slot's keys are split between the two nodes; the
      -- call would read and write half a queue (and a key it creates would stop the move
      -- with BUSYKEY). There a command on two keys of the slot that do not exist is
      -- refused; so the call answers TRYAGAIN before it touches anything, until the move is
      -- over (the owner, with every key, answers EXISTS 0). The old owner never runs it:
      -- the tag is not a key, so a MIGRATING node answers ASK.
      local tag = SCOPE.prefix
      local moving = redis.pcall('EXISTS', tag, tag .. ':moving')
      if type(moving) == 'table' and moving.err then
        -- (the importing node refuses it as "a non local key"; a permission is the
        -- caller's own problem, said as it is)
        if moving.err:sub(1, 6) == 'NOPERM' then return moving end
        return redis.error_reply('TRYAGAIN the slot of ' .. tag .. ' is being moved to ' ..
                                 'this node: try again once the move is over')
      end
    end
    local r = fn(keys, args)
    -- the waiters of the tasks the call ended: released, ended or revived, in this call
    if M.ctx.ended then M.settle() end
    -- then the batches whose members ended (those the settling ended too): counted, and
    -- their callbacks enqueued (lib/batch.lua)
    if M.ctx.batch_ends then M.settle_batches() end
    return r
  end
  local spec = {function_name = NS .. '_' .. name, callback = wrapped}
  if ro then spec.flags = {'no-writes'} end
  redis.register_function(spec)
end

return M
