-- lua/fn/progress.lua
-- FCALL <ns>_progress: what a running handler says of how far it got.
local fmt, now_ms, num, opt_error =
  util.fmt, util.now_ms, util.num, util.opt_error
local k =
  scope.k
local reg =
  call.reg
local load_config =
  config.load_config
local emit_task =
  events.emit_task
local BATCH =
  batch.BATCH

-- The longest message kept (bytes); a longer one is cut.
local PROGRESS_MESSAGE_MAX = 200

--[[ FCALL <ns>_progress 0 <worker_id> <task_id> <attempt> <fraction> <message>: the progress
of a running attempt, as its handler reported it (a pool process's `progress` message):
fraction a number in [0, 1] or '' for none, message at most PROGRESS_MESSAGE_MAX bytes (cut)
or ''. Stored as the task hash's `progress`, {"fraction": f, "message": m, "at": ms}, and
published as TASK_PROGRESS with the same metadata. Replies 'ok', or 'stale' (nothing
written) when the task is not running that attempt on that worker. ]]
local function progress(keys, args)
  local worker, tid, attempt, fraction, message = args[1], args[2], args[3], args[4], args[5]
  if not worker or not tid or not attempt or not fraction or not message then
    return opt_error('progress takes worker_id, task_id, attempt, fraction and message')
  end
  local f = nil
  if fraction ~= '' then
    f = tonumber(fraction)
    if not f or f ~= f or f < 0 or f > 1 then return opt_error('fraction must be in [0, 1]') end
  end
  if #message > PROGRESS_MESSAGE_MAX then message = message:sub(1, PROGRESS_MESSAGE_MAX) end
  local tkey = k('task', tid)
  local v = redis.pcall('HMGET', tkey, 'status', 'worker_id', 'attempt', 'queue', 'task_type',
                        'batch', 'batch_counted')
  if v.err or v[1] ~= 'running' or v[2] ~= worker or num(v[3]) ~= num(attempt) then
    return 'stale'
  end
  local ms = now_ms()
  local meta = {fraction = f, message = message ~= '' and message or nil, at = ms}
  redis.call('HSET', tkey, 'progress', cjson.encode(meta))
  -- a batch's member not yet ended once: its fraction joins the batch's progress
  if v[6] and not v[7] and f and redis.call('EXISTS', BATCH.key(v[6])) == 1 then
    redis.call('HSET', BATCH.progress_key(v[6]), tid, tostring(f))
  end
  emit_task(load_config(), ms, 'TASK_PROGRESS', tid, v[4], v[5], v[3], worker, meta)
  return 'ok'
end

reg('progress', progress)
