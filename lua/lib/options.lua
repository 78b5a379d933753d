-- lua/lib/options.lua
-- The options of the Functions that enqueue (<ns>_enqueue, _enqueue_bulk, _batch, _chain)
-- and the refusal of a full queue: one parser, one set of rules and messages.
local fmt, ID_RULE, is_name, is_task_id, NAME_RULE, parse_int, valid_name =
  util.fmt, util.ID_RULE, util.is_name, util.is_task_id, util.NAME_RULE, util.parse_int,
  util.valid_name
local ENQUEUE_LIMITS =
  task.ENQUEUE_LIMITS
local DEPS =
  deps.DEPS
local UNIQUE =
  unique.UNIQUE

-- The longest batch id (lib/batch.lua).
local BATCH_ID_MAX = 64

-- Enqueue options from args[first..]: a table, or nil and the INVALID_ARGUMENT message.
-- `per_task` allows the options that name one task (idempotency_key, task_id, after,
-- on_failure, batch, and lib/unique.lua's).
local function enqueue_options(c, args, first, per_task)
  local o = {priority = c.default_priority}
  if (#args - first + 1) % 2 ~= 0 then return nil, 'options come in name value pairs' end
  for i = first, #args, 2 do
    local name, v = args[i], args[i + 1]
    local lim = ENQUEUE_LIMITS[name]
    if lim then
      local n = parse_int(v, lim[1], lim[2])
      if not n then
        return nil, name .. ' must be an integer in [' .. fmt(lim[1]) .. ', ' .. fmt(lim[2]) .. ']'
      end
      o[name] = n
    elseif name == 'limit_key' then
      if not is_name(v) then return nil, 'limit_key must match ' .. NAME_RULE end
      o.limit_key = v
    elseif per_task and name == 'idempotency_key' then
      if #v < 1 or #v > 256 then return nil, 'idempotency_key must be 1-256 bytes' end
      o.idempotency_key = v
    elseif per_task and name == 'task_id' then
      if not is_task_id(v) then return nil, 'task_id must match ' .. ID_RULE end
      o.task_id = v
    elseif per_task and name == 'after' then
      local ids, why = DEPS.parse_after(v)
      if not ids then return nil, why end
      o.after = ids
    elseif per_task and name == 'batch' then
      if not valid_name(v, BATCH_ID_MAX) then
        return nil, 'batch must be a batch id ([A-Za-z0-9._:-]{1,' .. fmt(BATCH_ID_MAX) .. '})'
      end
      o.batch = v
    elseif per_task and name == 'on_failure' then
      if not DEPS.ON_FAILURE[v] then return nil, 'on_failure must be cancel, run or dead_letter' end
      o.on_failure = v
    elseif UNIQUE.OPTIONS[name] then -- lib/unique.lua
      if not per_task then
        return nil, name .. ' is refused for a group of tasks (bulk, batch, chain: a unique ' ..
                    'key names one task)'
      end
      local why = UNIQUE.option(o, name, v)
      if why then return nil, why end
    else
      return nil, 'unknown option ' .. name
    end
  end
  if o.on_failure and not o.after then return nil, 'on_failure needs after' end
  local uwhy = UNIQUE.settle(o) -- before delay_ms's checks: a debounce's window is its delay
  if uwhy then return nil, uwhy end
  if o.after and o.delay_ms and o.delay_ms > 0 then
    -- a waiting task starts when its parents are done: a delay would need the schedule
    -- to count from its release (enqueue it from the last parent's handler instead)
    return nil, 'delay_ms is refused with after (a waiting task is queued when its ' ..
                'parents are done)'
  end
  return o
end

local function queue_full(c, queue, depth)
  return redis.error_reply('QUEUE_FULL queue ' .. queue .. ' holds ' .. fmt(depth) ..
                           ' entries, max_queue_depth is ' .. fmt(c.max_queue_depth))
end

return {BATCH_ID_MAX = BATCH_ID_MAX, enqueue_options = enqueue_options, queue_full = queue_full}
