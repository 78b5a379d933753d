-- lua/lib/batch.lua
-- Batches (docs/reference.md 4.5): a group of tasks counted as they end, with callbacks
-- enqueued exactly once: on_success when every member succeeded, on_complete when every
-- member is terminal. The members' ends are noted by task.note_batch (the funnel of every
-- terminal transition) and counted here at the end of the Function call that ended them.
local TERMINAL =
  CONST.TERMINAL
local fmt, valid_name =
  util.fmt, util.valid_name
local SCOPE, k =
  scope.SCOPE, scope.k
local free_task_id, next_seq =
  ids.free_task_id, ids.next_seq
local qlen_add, queue_known =
  streams.qlen_add, streams.queue_known
local create_task =
  task.create_task
local load_config =
  config.load_config

--[[ The state:
  <p>:batch:<id>         hash: id, queue (where the callbacks go; in the cluster layout the
                         slot of the batch and of every member), state (open | closed),
                         total, pending (members not yet terminal once), succeeded, failed
                         (failed, cancelled or expired), dead_lettered, created_at,
                         closed_at, completed_at, on_success and on_complete (the callbacks'
                         specs, JSON {task_type, payload}), success_task and complete_task
                         (the callbacks' task ids, once enqueued), description.
  <p>:batch:<id>:failed  set: the members whose last end was not a success.
  <p>:batch:<id>:progress  hash: member id -> the fraction its running attempt last reported
                         (<ns>_progress), while it has not ended once (its first end deletes it):
                         the batch's progress is (ended + the sum of these) / total. Its
                         last field's HDEL deletes it.
  <p>:batches            sorted set: batch ids by creation time (the listing).
  member task hash       batch = <id>; batch_counted = the status its last end was counted as.
A complete batch (closed, nothing pending) keeps its keys for task_retention_s. ]]
local BATCH = {
  MEMBERS_MAX = 100000, -- members of one batch (bounds the failed set a callback reads)
  FAILED_IDS_MAX = 1000, -- failed members' ids handed to a callback
  ID_MAX = options.BATCH_ID_MAX,
}

function BATCH.key(bid) return k('batch', bid) end
function BATCH.failed_key(bid) return k('batch', bid, 'failed') end
function BATCH.index_key() return k('batches') end
function BATCH.progress_key(bid) return k('batch', bid, 'progress') end
function BATCH.valid_id(bid) return valid_name(bid, BATCH.ID_MAX) end

-- The count field of a terminal status.
local function bucket(st)
  if st == 'succeeded' then return 'succeeded' end
  if st == 'dead_lettered' then return 'dead_lettered' end
  return 'failed'
end

-- Why task ids cannot join batch `bid` (an error reply), or nil: it does not exist, is
-- complete, or would pass MEMBERS_MAX with `n` more.
function BATCH.join_refusal(bid, n)
  local v = redis.pcall('HMGET', BATCH.key(bid), 'total', 'completed_at')
  if type(v) ~= 'table' or v.err or not v[1] then
    local why = 'NOT_FOUND batch ' .. tostring(bid) .. ' does not exist'
    if SCOPE.cluster then
      why = why .. ' in the slot of queue ' .. tostring(SCOPE.queue) .. ' (cluster layout: ' ..
            'a batch holds tasks of its own queue only)'
    end
    return redis.error_reply(why)
  end
  if v[2] then
    return redis.error_reply('WRONG_STATE batch ' .. bid .. ' is complete: it takes no ' ..
                             'more members')
  end
  if (tonumber(v[1]) or 0) + n > BATCH.MEMBERS_MAX then
    return redis.error_reply('INVALID_ARGUMENT batch ' .. bid .. ' would have more than ' ..
                             fmt(BATCH.MEMBERS_MAX) .. ' members')
  end
  return nil
end

-- Task `tkey` joins batch `bid` (checked by join_refusal): counted in total and pending.
function BATCH.join(bid, tkey)
  redis.call('HSET', tkey, 'batch', bid)
  redis.call('HINCRBY', BATCH.key(bid), 'total', 1)
  redis.call('HINCRBY', BATCH.key(bid), 'pending', 1)
end

-- n tasks joined at once (a create or an add of many).
function BATCH.joined(bid, n)
  redis.call('HINCRBY', BATCH.key(bid), 'total', n)
  redis.call('HINCRBY', BATCH.key(bid), 'pending', n)
end

-- A callback's spec from its task type and payload (a JSON object, '' for {}), or nil and
-- why not.
function BATCH.callback_spec(name, ttype, payload)
  if not valid_name(ttype, CONST.NAME_MAX) then
    return nil, name .. ' must be a task type ([A-Za-z0-9._:-]{1,' .. CONST.NAME_MAX .. '})'
  end
  local p = {}
  if payload and payload ~= '' then
    local ok, v = pcall(cjson.decode, payload)
    if not ok or type(v) ~= 'table' or payload:match('^%s*%[') then
      return nil, name .. '_payload must be a JSON object'
    end
    p = v
  end
  return cjson.encode({task_type = ttype, payload = p})
end

-- The callback `which` (on_success | on_complete) of batch b (its hash as a table),
-- enqueued into the batch's queue: the spec's payload with `batch` set to the batch's
-- counts and its failed members' ids (at most FAILED_IDS_MAX). max_queue_depth is not
-- applied: a callback is owed, not offered. Returns its task id.
local function fire(c, ms, b, which)
  local spec = cjson.decode(b[which])
  local failed = redis.call('SRANDMEMBER', BATCH.failed_key(b.id), BATCH.FAILED_IDS_MAX)
  table.sort(failed)
  local payload = spec.payload
  if type(payload) ~= 'table' then payload = {} end
  payload.batch = nil
  -- the batch's part written here, its failed_ids as an array even when empty (cjson
  -- writes an empty table as {}), then put into the caller's object as its `batch`
  local ids = {}
  for i, tid in ipairs(failed) do ids[i] = cjson.encode(tid) end
  local info = cjson.encode({id = b.id, total = tonumber(b.total) or 0,
                             succeeded = tonumber(b.succeeded) or 0,
                             failed = tonumber(b.failed) or 0,
                             dead_lettered = tonumber(b.dead_lettered) or 0, callback = which})
  info = info:sub(1, -2) .. ',"failed_ids":[' .. table.concat(ids, ',') .. ']}'
  local body = next(payload) and cjson.encode(payload) or '{}'
  local text = body == '{}' and '{"batch":' .. info .. '}' or
               body:sub(1, -2) .. ',"batch":' .. info .. '}'
  local tid, tkey = free_task_id(ms, fmt(ms) .. '-' .. next_seq())
  if not tid then error('ID_EXISTS every id minted was taken (<p>:seq rewound?)') end
  qlen_add(b.queue, create_task(c, ms, tid, b.queue, spec.task_type, text,
                                {priority = c.default_priority or 5}, tkey))
  queue_known(b.queue)
  redis.call('HSET', tkey or k('task', tid), 'batch_callback', b.id)
  return tid
end

--[[ Batch `bid` after a change (members ended, closed, members added): when it is closed
and nothing is pending, it is complete (completed_at, the keys' retention) and on_complete
is enqueued; when every member succeeded, on_success. Each callback once: its task id is
written in the same atomic call, and a batch with the id set never enqueues it again. ]]
function BATCH.check(c, ms, bid)
  local bkey = BATCH.key(bid)
  local raw = redis.call('HGETALL', bkey)
  if #raw == 0 then return end
  local b = {}
  for i = 1, #raw, 2 do b[raw[i]] = raw[i + 1] end
  if b.state ~= 'closed' or (tonumber(b.pending) or 0) > 0 then return end
  if not b.completed_at then
    b.completed_at = fmt(ms)
    redis.call('HSET', bkey, 'completed_at', b.completed_at)
    redis.call('EXPIRE', bkey, fmt(c.task_retention_s))
    redis.call('EXPIRE', BATCH.failed_key(bid), fmt(c.task_retention_s))
  end
  if b.on_complete and not b.complete_task then
    redis.call('HSET', bkey, 'complete_task', fire(c, ms, b, 'on_complete'))
  end
  if b.on_success and not b.success_task and
     (tonumber(b.succeeded) or 0) == (tonumber(b.total) or 0) then
    redis.call('HSET', bkey, 'success_task', fire(c, ms, b, 'on_success'))
  end
end

--[[ The counting of the call's members' ends (call.ctx.batch_ends: batch id, task id,
status, flat, with batch_ms the call's clock; noted by task.note_batch), run by the wrapper
once the Function has run (and after the dependencies' settling, whose ends it counts too).
A member's first end is marked with HSETNX batch_counted (one command: the usual case); a
member counted before (it was requeued since) moves from its old count to the new one, and
the same end twice counts once. The counts of a batch change by one HINCRBY per count per
call, however many of its members the call ended (a finish ends up to a fetch's worth).
Then each batch touched is checked (BATCH.check). ]]
function BATCH.settle()
  local cx = call.ctx
  local list, ms, c = cx.batch_ends, cx.batch_ms, load_config()
  cx.batch_ends = nil
  local delta, order, live = {}, {}, {}
  for i = 1, #list, 3 do
    local bid, tid, st = list[i], list[i + 1], list[i + 2]
    if live[bid] == nil then live[bid] = redis.call('EXISTS', BATCH.key(bid)) == 1 end
    if TERMINAL[st] and live[bid] then
      local tkey = k('task', tid)
      local before = nil
      if redis.call('HSETNX', tkey, 'batch_counted', st) == 0 then
        before = redis.call('HGET', tkey, 'batch_counted')
        if before == st then before = false else redis.call('HSET', tkey, 'batch_counted', st) end
      end
      if before ~= false then
        local d = delta[bid]
        if not d then
          d = {pending = 0, succeeded = 0, failed = 0, dead_lettered = 0}
          delta[bid] = d
          order[#order + 1] = bid
        end
        if before then
          d[bucket(before)] = d[bucket(before)] - 1
          if before ~= 'succeeded' and st == 'succeeded' then
            redis.call('SREM', BATCH.failed_key(bid), tid)
          end
        else
          d.pending = d.pending - 1
          redis.call('HDEL', BATCH.progress_key(bid), tid) -- ended: counted whole from now
        end
        d[bucket(st)] = d[bucket(st)] + 1
        if st ~= 'succeeded' then redis.call('SADD', BATCH.failed_key(bid), tid) end
      end
    end
  end
  for _, bid in ipairs(order) do
    local bkey = BATCH.key(bid)
    for f, v in pairs(delta[bid]) do
      if v ~= 0 then redis.call('HINCRBY', bkey, f, v) end
    end
    BATCH.check(c, ms, bid)
  end
end
call.settle_batches = BATCH.settle

return {BATCH = BATCH}
