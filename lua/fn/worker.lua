-- lua/fn/worker.lua
-- FCALL <ns>_worker_event: a worker's start and stop, as events.
local now_ms, opt_error =
  util.now_ms, util.opt_error
local reg =
  call.reg
local load_config =
  config.load_config
local emit =
  events.emit

--[[ FCALL <ns>_worker_event 0 <worker_id> <type>: publishes WORKER_STARTED or
WORKER_STOPPED through the one event builder. ]]
local WORKER_EVENTS = {WORKER_STARTED = true, WORKER_STOPPED = true}
local function worker_event(keys, args)
  if not WORKER_EVENTS[args[2] or ''] then
    return opt_error('type must be WORKER_STARTED or WORKER_STOPPED')
  end
  emit(load_config(), now_ms(), args[2], {}, args[1])
  return 'ok'
end
reg('worker_event', worker_event)

