-- lua/lib/streams.lua
-- A queue's streams: their names, the queue's length counter, the acknowledgement and
-- deletion of entries, a task's fresh entry, and the set of known queues.
local BANDS, BAND_NAMES, GROUP =
  CONST.BANDS, CONST.BAND_NAMES, CONST.GROUP
local fmt, is_name, split_id =
  util.fmt, util.is_name, util.split_id
local SCOPE, k =
  scope.SCOPE, scope.k

-- Adds a queue to <prefix>:queues, the set <ns>_stats reports on. Never raises.
local function queue_known(queue)
  redis.pcall('SADD', k('queues'), queue)
end

-- The names of a queue's streams, kept across calls for a bounded number of queues
-- (each enqueue counts all the bands; building them cost more than the XLENs).
-- stream_queue_memo is the other way round: the queue of each stream named there.
local stream_keys_memo, stream_keys_memo_n, stream_queue_memo = {}, 0, {}
local memo_prefix = nil -- the prefix the names were built with
local function stream_key(queue, priority)
  if memo_prefix ~= SCOPE.prefix then -- the names hold the prefix: a call of another scope
    stream_keys_memo, stream_keys_memo_n, stream_queue_memo = {}, 0, {}
    memo_prefix = SCOPE.prefix
  end
  local keys = stream_keys_memo[queue]
  if not keys then
    SCOPE.check(queue) -- once per queue and scope: a name kept was checked in this scope
    if stream_keys_memo_n >= 1024 then
      stream_keys_memo, stream_keys_memo_n, stream_queue_memo = {}, 0, {}
    end
    keys = {}
    for band = 0, BANDS - 1 do
      keys[band] = k('stream', queue, BAND_NAMES[band])
      stream_queue_memo[keys[band]] = queue
    end
    stream_keys_memo[queue] = keys
    stream_keys_memo_n = stream_keys_memo_n + 1
  end
  return keys[priority] or k('stream', queue, 'p' .. fmt(priority))
end

--[[ The queue whose band `stream` is, or nil when stream_key() names no band of any queue
so: the names after each ':stream:' up to the last ':' are tried (a queue name may hold
':'), each checked by building its keys. The daemon passes stream names (finish, handback);
the answer is kept with stream_key()'s. ]]
local function stream_queue(stream)
  local q = stream_queue_memo[stream]
  if q then return q end
  local last = stream:match('^.*():')
  local from = 1
  while last do
    local i, j = stream:find(':stream:', from, true)
    if not i or j + 1 >= last then return nil end
    q = stream:sub(j + 1, last - 1)
    if is_name(q) and not SCOPE.refuse(q) then
      stream_key(q, 0)
      if stream_queue_memo[stream] == q then return q end
    end
    from = i + 1
  end
  return nil
end

--[[ The queue's length counter <prefix>:queue:<q>:length, what QUEUE_FULL compares with
max_queue_depth: the entries in the queue's streams (waiting or delivered, until deleted),
as the sum of their XLEN, which it replaced (ten XLEN per enqueue). Every Function that
adds an entry adds 1 (enqueue, enqueue_bulk, cron, promotion of delayed and retrying tasks,
requeue, handback, the reaper's requeue); every deletion subtracts what XDEL, XTRIM or DEL
removed (acknowledgements at settle and finish, queue_clear, queue_remove). An entry no
Function wrote (a raw XADD) counts from its first delivery (fetch) or queue_clear's read:
until then it is not in the counter, so raw producers may take a queue past the limit.
Healing: a counter that is missing, not an integer, or would fall below 0 is set to the
XLEN sum; a fetch that finds a queue with nothing new sets it to that sum too (nothing
undelivered then: the sum is exactly what the counter counts). ]]
local function qlen_key(queue) return k('queue', queue, 'length') end

-- The sum of the queue's XLEN (a stream key of another type counts 0).
local function queue_depth(queue)
  local depth = 0
  for band = 0, BANDS - 1 do
    local n = redis.pcall('XLEN', stream_key(queue, band))
    if type(n) == 'number' then depth = depth + n end
  end
  return depth
end

local function qlen_resync(queue)
  local n = queue_depth(queue)
  redis.call('SET', qlen_key(queue), fmt(n))
  return n
end

-- The counter, for a QUEUE_FULL check.
local function qlen(queue)
  local n = tonumber((redis.pcall('GET', qlen_key(queue))))
  if not n or n < 0 or n % 1 ~= 0 then return qlen_resync(queue) end
  return n
end

-- Adds `by` (negative: entries deleted) to the counter of `queue` (nil: none).
local function qlen_add(queue, by)
  if by == 0 or not queue then return end
  local n = redis.pcall('INCRBY', qlen_key(queue), by)
  if type(n) ~= 'number' or n < 0 then qlen_resync(queue) end
end

--[[ Deletes the entries `ids` of one stream, all just acknowledged. XDEL finds each entry
by walking its stream node from the start, which made it a fifth of a finish's Redis time.
But every entry older than the group's oldest pending one was delivered (a group reads in
id order) and is no longer pending, so it was acknowledged: one XTRIM MINID removes that
whole prefix, by nodes, and only the ids above it need XDEL. Nothing else is deleted: an
entry not yet delivered is newer than every pending one, and when nothing is pending any
more the cut is just after the newest of `ids`. Returns how many entries were deleted. ]]
local function delete_acked(stream, ids)
  local pend = redis.call('XPENDING', stream, GROUP)
  if pend[1] > 0 then
    -- Below the oldest pending entry all is acknowledged: trimmed by nodes. Ids at or
    -- above it are deleted one by one (all of them if an id is not two plain numbers).
    local cut_ms, cut_seq = split_id(pend[2])
    local above = {}
    for i = 1, #ids do
      local ms, seq = split_id(ids[i])
      if not cut_ms or not ms or ms > cut_ms or (ms == cut_ms and seq >= cut_seq) then
        above[#above + 1] = ids[i]
      end
    end
    local n = 0
    if cut_ms then n = redis.call('XTRIM', stream, 'MINID', pend[2]) end
    if #above > 0 then n = n + redis.call('XDEL', stream, unpack(above)) end
    return n
  end
  -- Nothing pending: every entry up to the newest of `ids` goes.
  local top_ms, top_seq
  for i = 1, #ids do
    local ms, seq = split_id(ids[i])
    if not ms then return redis.call('XDEL', stream, unpack(ids)) end
    if not top_ms or ms > top_ms or (ms == top_ms and seq > top_seq) then
      top_ms, top_seq = ms, seq
    end
  end
  return redis.call('XTRIM', stream, 'MINID', fmt(top_ms) .. '-' .. fmt(top_seq + 1))
end

-- A fresh entry for task `tid` in its own stream (its queue and band), at h.attempt.
local function add_entry(h, tid)
  redis.call('XADD', stream_key(h.queue, tonumber(h.priority) or 5), '*', 'task_id', tid,
             'attempt', h.attempt)
  qlen_add(h.queue, 1)
end

local function ack(stream, entry_id)
  redis.call('XACK', stream, GROUP, entry_id)
  qlen_add(stream_queue(stream), -redis.call('XDEL', stream, entry_id))
end
local function ensure_group(stream)
  redis.pcall('XGROUP', 'CREATE', stream, GROUP, '0', 'MKSTREAM')
end

return {ack = ack, add_entry = add_entry, delete_acked = delete_acked,
        ensure_group = ensure_group, qlen_add = qlen_add, qlen_key = qlen_key,
        qlen_resync = qlen_resync, queue_known = queue_known, stream_key = stream_key,
        stream_queue = stream_queue}
