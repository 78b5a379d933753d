-- lua/lib/deps.lua
-- Task dependencies (docs/reference.md 4.4): a task enqueued with `after` waits, in
-- status `waiting`, for its parents; it is released (queued) by the call that ends the last
-- of them, ended or let run when one of them ends other than in success (`on_failure`),
-- and revived when such a parent is requeued and then succeeds.
local TERMINAL =
  CONST.TERMINAL
local fmt, valid_name =
  util.fmt, util.valid_name
local SCOPE, k =
  scope.SCOPE, scope.k
local emit =
  events.emit
local add_entry, queue_known =
  streams.add_entry, streams.queue_known
local dead_letter, finish_terminal, idem_set, read_task, waiters_key =
  task.dead_letter, task.finish_terminal, task.idem_set, task.read_task, task.waiters_key

--[[ The state, in the hashes and one set per parent:
  child hash   after (the parents' ids, comma-separated, in the order given), on_failure
               (cancel | run | dead_letter), deps_pending (parents not yet done, while
               waiting), deps_failed (JSON object: parent id -> the status it ended in,
               for the parents on_failure=run let pass), failed_by (the parent whose end
               ended it), parent_results (JSON object, written at release) and
               parent_results_truncated;
  parent hash  has_waiters = 1 once a task waits for it (<ns>_finish reads it with the
               fields it reads anyway: a success asks nothing more of Redis otherwise);
  <p>:waiters:<parent>  the tasks that wait for it (task.waiters_key). Deleted when the
               parent succeeds (every member settled); kept, with the parent's retention
               TTL, when it ends otherwise, so that a requeue that then succeeds finds the
               waiters it ended (failed_by) and revives them.
A waiting task is in no stream and no schedule: nothing reads it until a parent ends. ]]
local DEPS = {
  AFTER_MAX = 100,       -- parents of one task
  WAITERS_MAX = 10000,   -- tasks that wait for one parent (the work its end does)
  RESULTS_MAX = 65536,   -- bytes of a released task's parent_results
}
local ON_FAILURE = {cancel = true, run = true, dead_letter = true}
DEPS.ON_FAILURE = ON_FAILURE

-- The ids of an `after` option (deduplicated, in order), or nil and why not.
function DEPS.parse_after(v)
  local ids, seen = {}, {}
  if type(v) ~= 'string' or v == '' then return nil, 'after must name at least one task id' end
  for id in (v .. ','):gmatch('([^,]*),') do
    if not valid_name(id, 256) then
      return nil, 'after must be task ids ([A-Za-z0-9._:-]{1,256}) separated by commas'
    end
    if not seen[id] then
      seen[id] = true
      ids[#ids + 1] = id
      if #ids > DEPS.AFTER_MAX then
        return nil, 'after names more than ' .. fmt(DEPS.AFTER_MAX) .. ' tasks'
      end
    end
  end
  return ids
end

-- The status of task `tid`, nil when there is no such hash (or a key of another type); and
-- the error reply when the read was refused (the caller may not read task hashes: the
-- producer role).
local function status_of(tid)
  local s = redis.pcall('HGET', k('task', tid), 'status')
  if type(s) == 'string' then return s end
  if type(s) == 'table' and s.err and s.err:sub(1, 9) ~= 'WRONGTYPE' then return nil, s end
  return nil
end

-- Why an enqueue after `ids` is refused (an error reply), or nil: a parent that does not
-- exist (NOT_FOUND), or one that has WAITERS_MAX waiters already.
function DEPS.refusal(ids)
  for _, pid in ipairs(ids) do
    local st, denied = status_of(pid)
    if denied then
      return redis.error_reply('NOPERM after needs to read the status of task ' .. pid ..
                               ': this user may not read task hashes (the producer role ' ..
                               'cannot; enqueue with after as a user that can)')
    end
    if not st then
      local why = 'NOT_FOUND task ' .. pid .. ' (named by after) does not exist'
      if SCOPE.cluster then
        why = why .. ' in the slot of queue ' .. tostring(SCOPE.queue) .. ' (cluster ' ..
              'layout: a task can wait only for tasks of its own queue)'
      end
      return redis.error_reply(why)
    end
    local n = redis.pcall('SCARD', waiters_key(pid))
    if type(n) == 'number' and n >= DEPS.WAITERS_MAX then
      return redis.error_reply('INVALID_ARGUMENT task ' .. pid .. ' has ' ..
                               fmt(DEPS.WAITERS_MAX) .. ' waiting tasks already (the most)')
    end
  end
  return nil
end

-- Whether result text can be embedded in JSON as it is (strict JSON: cjson also takes
-- control characters in strings and numbers such as 1. or -.5, and a result cut to
-- result_max_bytes is not JSON at all).
local function json_text(s)
  if s:find('%z') then return false end
  cjson.decode_invalid_numbers(false)
  local ok = pcall(cjson.decode, s)
  cjson.decode_invalid_numbers(true)
  if not ok then return false end
  local bad = false
  local t = s:gsub('\\.', ''):gsub('"[^"]*"', function(q)
    if q:find('[%z\1-\31]') then bad = true end
    return '0'
  end)
  return not bad and not t:find('%D%.') and not t:find('^%.') and not t:find('%.%D') and
         not t:find('%.$')
end

--[[ The parents' results as one JSON object, id -> the stored result (JSON as it is; a
result that is not JSON as a string), null for a parent that did not succeed, whose result
was null or has expired. At most RESULTS_MAX bytes: a result that does not fit is null,
and the second value is true. ]]
local function parent_results(after)
  local parts, size, cut = {}, 2, false
  for pid in after:gmatch('[^,]+') do
    local v = 'null'
    if status_of(pid) == 'succeeded' then
      local r = redis.pcall('GET', k('result', pid))
      if type(r) == 'string' then v = json_text(r) and r or cjson.encode(r) end
    end
    local part = cjson.encode(pid) .. ':' .. v
    if size + #part + 1 > DEPS.RESULTS_MAX then
      part, cut = cjson.encode(pid) .. ':null', true
    end
    size = size + #part + 1
    parts[#parts + 1] = part
  end
  return '{' .. table.concat(parts, ',') .. '}', cut
end

-- Waiting -> queued: the parents' results, a fresh entry at the task's band (and the
-- queue's length counter), TASK_QUEUED with reason `released`. max_queue_depth is not
-- applied: the task was counted when it was enqueued.
local function release(c, ms, tkey, h)
  local results, cut = parent_results(h.after or '')
  redis.call('HSET', tkey, 'status', 'queued', 'deps_pending', '0', 'updated_at', fmt(ms),
             'parent_results', results)
  if cut then redis.call('HSET', tkey, 'parent_results_truncated', '1') end
  h.status = 'queued'
  add_entry(h, h.id)
  queue_known(h.queue)
  emit(c, ms, 'TASK_QUEUED', h, '', {reason = 'released'})
  return 'queued'
end

-- The end of waiting task h because parent `pid` ended in `st` (on_failure cancel or
-- dead_letter): cancelled or dead-lettered, class dependency_failed, failed_by = pid.
-- Both go through finish_terminal, which notes the task's own waiters (the cascade).
local function fail(c, ms, tkey, h, pid, st)
  local err = 'dependency_failed: ' .. pid .. ' ' .. st
  redis.call('HSET', tkey, 'failed_by', pid)
  if h.on_failure == 'dead_letter' then
    return dead_letter(c, tkey, h, ms, err, 'dependency_failed', '')
  end
  finish_terminal(c, tkey, h, 'cancelled', ms, {last_error = err,
                                                last_error_class = 'dependency_failed'})
  emit(c, ms, 'TASK_CANCELLED', h, '', {reason = 'dependency_failed', parent = pid,
                                        parent_status = st})
  return 'cancelled'
end

-- Adds parent `pid` -> status `st` to the task's deps_failed (a parent on_failure=run let
-- pass).
local function note_failed(tkey, h, pid, st)
  local ok, m = pcall(cjson.decode, h.deps_failed or '{}')
  if not ok or type(m) ~= 'table' then m = {} end
  m[pid] = st
  h.deps_failed = cjson.encode(m)
  redis.call('HSET', tkey, 'deps_failed', h.deps_failed)
end

--[[ Task tkey (written waiting, `after` = pid alone) waits for pid, a task this very call
wrote and has not ended (a chain's link): wired without reading pid's hash, which the
caller may not be allowed to read (the producer role). ]]
function DEPS.wire_fresh(c, ms, tkey, h, pid)
  redis.call('SADD', waiters_key(pid), h.id)
  redis.call('HSET', k('task', pid), 'has_waiters', '1')
  redis.call('HSET', tkey, 'status', 'waiting', 'deps_pending', '1')
  h.status = 'waiting'
  emit(c, ms, 'TASK_WAITING', h, '', {deps_pending = 1})
  return 'waiting'
end

--[[ Wires task h (status waiting, `after` set) to its parents, as they stand now: a parent
that succeeded is done; one not terminal is waited for (the task joins its waiters set);
one ended otherwise (or gone: its hash expired) applies on_failure at once (run: done, in
deps_failed; cancel, dead_letter: the task ends, and joins the parent's waiters set to be
revived if it is requeued and succeeds). Then: ended, released (nothing left to wait for)
or waiting with deps_pending (TASK_WAITING). Returns the task's status. ]]
function DEPS.wire(c, ms, tkey, h)
  local pending, fpid, fst = 0, nil, nil
  for pid in (h.after or ''):gmatch('[^,]+') do
    local st = status_of(pid) or 'gone'
    if st ~= 'succeeded' then
      local ended = TERMINAL[st] or st == 'gone'
      if ended and h.on_failure == 'run' then
        note_failed(tkey, h, pid, st)
      else
        if st ~= 'gone' then
          redis.call('SADD', waiters_key(pid), h.id)
          redis.call('HSET', k('task', pid), 'has_waiters', '1')
        end
        if not ended then
          pending = pending + 1
        elseif not fpid then
          fpid, fst = pid, st
        end
      end
    end
  end
  if fpid then return fail(c, ms, tkey, h, fpid, fst) end
  if pending == 0 then return release(c, ms, tkey, h) end
  redis.call('HSET', tkey, 'status', 'waiting', 'deps_pending', fmt(pending))
  h.status = 'waiting'
  emit(c, ms, 'TASK_WAITING', h, '', {deps_pending = pending})
  return 'waiting'
end

-- Whether task h was ended by a dependency's failure (and so can be revived).
function DEPS.ended_by_dependency(h)
  return h.after ~= nil and h.failed_by ~= nil and h.last_error_class == 'dependency_failed' and
         (h.status == 'cancelled' or h.status == 'dead_lettered' or h.status == 'failed')
end

--[[ A task a dependency's failure ended, back to waiting (a parent requeued and succeeded,
or <ns>_requeue of the task itself): its dead-letter entry deleted (dlq_entry emptied, as a
requeue does), failed_by and finished_at removed, its TTL removed, its idempotency record
`processing` again; then wired to its parents as they stand (DEPS.wire). ]]
function DEPS.revive(c, ms, tkey, h)
  if h.dlq_entry and h.dlq_entry ~= '' then
    redis.call('XDEL', k('stream', 'dead-letter'), h.dlq_entry)
  end
  redis.call('HSET', tkey, 'status', 'waiting', 'dlq_entry', '', 'updated_at', fmt(ms))
  redis.call('HDEL', tkey, 'failed_by', 'finished_at')
  redis.call('PERSIST', tkey)
  redis.call('PERSIST', waiters_key(h.id))
  h.status, h.failed_by, h.dlq_entry = 'waiting', nil, ''
  idem_set(h, 'processing', ms)
  return DEPS.wire(c, ms, tkey, h)
end

-- Waiter w of parent `pid`, which ended in `st`.
local function settle_waiter(c, ms, pid, st, wid)
  local wkey = k('task', wid)
  local h = read_task(wkey, wid)
  if not h then return end -- gone (its retention) or of another type: nothing to settle
  if st == 'succeeded' then
    if h.status == 'waiting' then
      local n = (tonumber(h.deps_pending) or 1) - 1
      if n <= 0 then
        release(c, ms, wkey, h)
      else
        redis.call('HSET', wkey, 'deps_pending', fmt(n))
      end
    elseif h.failed_by == pid and DEPS.ended_by_dependency(h) then
      DEPS.revive(c, ms, wkey, h)
    end
  elseif h.status == 'waiting' then
    if h.on_failure == 'run' then
      redis.call('SREM', waiters_key(pid), wid) -- done with this parent, whatever comes
      note_failed(wkey, h, pid, st)
      local n = (tonumber(h.deps_pending) or 1) - 1
      if n <= 0 then
        release(c, ms, wkey, h)
      else
        redis.call('HSET', wkey, 'deps_pending', fmt(n))
      end
    else
      fail(c, ms, wkey, h, pid, st)
    end
  end
end

--[[ The settling of the call's ends (call.ctx.ended, noted by finish_terminal and the
successes of <ns>_finish), run by the wrapper once the Function has run: for each ended
parent, each of its waiters (settle_waiter). A waiter that ends here is appended to the
same list, so a cascade is a loop, not a recursion: each entry is one terminal transition
of this call, and each parent has at most WAITERS_MAX waiters. ]]
function DEPS.settle()
  local cx = call.ctx
  local list, c, ms = cx.ended, cx.ended_c, cx.ended_ms
  local i = 1
  while i < #list do
    local pid, st = list[i], list[i + 1]
    i = i + 2
    local key = waiters_key(pid)
    local ws = redis.pcall('SMEMBERS', key)
    if type(ws) == 'table' and not ws.err and #ws > 0 then
      if st == 'succeeded' then
        redis.call('DEL', key)
      else
        redis.call('EXPIRE', key, fmt(c.task_retention_s))
      end
      table.sort(ws) -- the same order on every replica and every run
      for _, wid in ipairs(ws) do settle_waiter(c, ms, pid, st, wid) end
    end
  end
  cx.ended, cx.ended_c, cx.ended_ms = nil, nil, nil
end
call.settle = DEPS.settle

return {DEPS = DEPS}
