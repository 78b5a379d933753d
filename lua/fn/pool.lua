-- lua/fn/pool.lua
-- Handler pools ([pool:NAME] of the daemons): an operator's restart of a pool's processes.
local fmt, now_ms, opt_error =
  util.fmt, util.now_ms, util.opt_error
local k =
  scope.k
local reg =
  call.reg
local audit =
  events.audit

-- A pool's name: the config section's rule, which is the namespace's.
local function pool_name_ok(name)
  return type(name) == 'string' and #name >= 1 and #name <= 64 and
         name:match('^[A-Za-z0-9._-]+$') ~= nil
end

--[[ FCALL <ns>_pool_restart 0 <actor> <pool>: asks every daemon that runs [pool:<pool>] to
replace its processes one at a time (a deploy of new code). Stores the request's time (ms,
Redis's clock) as field <pool> of <p>:pool_restart; each daemon reads its pools' fields at
every heartbeat and rolls a pool whose time is newer than its processes. Replies that time. ]]
local function pool_restart(keys, args)
  local actor, name = args[1], args[2]
  if not pool_name_ok(name) then
    return opt_error('pool name must match [A-Za-z0-9._-]{1,64}')
  end
  local ms = now_ms()
  redis.call('HSET', k('pool_restart'), name, fmt(ms))
  audit('pool_restart', '', actor, ms, '', {'pool', name})
  return ms
end

reg('pool_restart', pool_restart)
