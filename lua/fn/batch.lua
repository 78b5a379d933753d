-- lua/fn/batch.lua
-- FCALL <ns>_batch (create, add, close), FCALL_RO <ns>_batch_show and FCALL <ns>_chain:
-- groups of tasks made in one atomic call (lib/batch.lua, lib/deps.lua).
-- GROUP_MAX: the most tasks one call makes (as <ns>_enqueue_bulk); LIST_MAX: the most
-- batches one <ns>_batch_list answers. Their owner is C (task.h), which dtqctl and dtq-web
-- read too.
local GROUP_MAX, LIST_MAX =
  CONST.GROUP_MAX, CONST.BATCH_LIST_MAX
local fmt, is_name, NAME_RULE, now_ms, opt_error, parse_int =
  util.fmt, util.is_name, util.NAME_RULE, util.now_ms, util.opt_error, util.parse_int
local SCOPE, k =
  scope.SCOPE, scope.k
local reg =
  call.reg
local load_config =
  config.load_config
local free_task_id, seq_incr =
  ids.free_task_id, ids.seq_incr
local qlen_add, qlen_resync, queue_known =
  streams.qlen_add, streams.qlen_resync, streams.queue_known
local create_task, payload_refusal, read_task =
  task.create_task, task.payload_refusal, task.read_task
local DEPS =
  deps.DEPS
local enqueue_options, queue_full =
  options.enqueue_options, options.queue_full
local BATCH =
  batch.BATCH
local LEAN =
  lean.LEAN

local DESCRIPTION_MAX = 200

--[[ The tasks of args[at..]: n, then n pairs task_type payload, in a queue. Returns the
list of {task_type, payload}, the index of the first argument after them, or nil and the
error reply. Every payload is checked before anything is written: a group is made whole
or not at all. ]]
local function read_group(c, queue, args, at)
  if not is_name(queue) then return nil, opt_error('queue name must match ' .. NAME_RULE) end
  local bad = SCOPE.refuse(queue)
  if bad then return nil, bad end
  local n = parse_int(args[at], 1, GROUP_MAX)
  if not n or #args < at + 2 * n then
    return nil, opt_error('n must be the number of task_type payload pairs that follow, 1-' ..
                          fmt(GROUP_MAX))
  end
  local list = {}
  for i = 1, n do
    local ttype, payload = args[at + 2 * i - 1], args[at + 2 * i]
    if not is_name(ttype) then
      return nil, opt_error('task ' .. fmt(i) .. ': task_type must match ' .. NAME_RULE)
    end
    local refusal = payload_refusal(c, payload)
    if refusal then return nil, refusal end
    list[i] = {ttype, payload}
  end
  local _, lean = LEAN.depth_mode(queue)
  if lean then
    return nil, opt_error('queue ' .. queue .. ' is lean: its tasks keep no record by id, ' ..
                          'so they cannot be grouped')
  end
  return list, at + 2 * n + 1
end

-- Splits the options at args[from..] into the group's own (named in `own`: a table name ->
-- true) and the tasks' (a list for enqueue_options). Returns own, rest, or nil and why.
local function split_options(args, from, own)
  if (#args - from + 1) % 2 ~= 0 then return nil, 'options come in name value pairs' end
  local mine, rest = {}, {}
  for i = from, #args, 2 do
    if own[args[i]] then
      mine[args[i]] = args[i + 1]
    else
      rest[#rest + 1], rest[#rest + 2] = args[i], args[i + 1]
    end
  end
  return mine, rest
end

-- The ids of n new tasks, minted as <ns>_enqueue_bulk mints them, each checked.
local function mint_ids(ms, n)
  local seq, out = seq_incr(n) - n, {}
  for i = 1, n do
    local tid, tkey = free_task_id(ms, fmt(ms) .. '-' .. fmt(seq + i))
    if not tid then return nil end
    out[i] = {tid, tkey or k('task', tid)}
  end
  return out
end

-- Writes the tasks of a group (read_group) with options o; `each(i, tid, tkey)` runs after
-- each is written. Returns the ids, or nil and the error reply.
local function write_group(c, ms, queue, list, o, each)
  local depth = LEAN.depth_mode(queue)
  if depth + #list > c.max_queue_depth then depth = qlen_resync(queue) end
  if depth + #list > c.max_queue_depth then return nil, queue_full(c, queue, depth) end
  local idlist = mint_ids(ms, #list)
  if not idlist then
    return nil, redis.error_reply('ID_EXISTS every id minted was taken (<p>:seq rewound?)')
  end
  local added, out = 0, {}
  for i, t in ipairs(list) do
    local tid, tkey = idlist[i][1], idlist[i][2]
    local to = o
    if each then to = each(i, tid, tkey, o) or o end
    added = added + create_task(c, ms, tid, queue, t[1], t[2], to, tkey)
    out[i] = tid
  end
  qlen_add(queue, added)
  queue_known(queue)
  return out
end

local BATCH_OPTIONS = {batch_id = true, on_success = true, on_success_payload = true,
                       on_complete = true, on_complete_payload = true, open = true,
                       description = true}
local ADD_OPTIONS = {}

--[[ FCALL <ns>_batch 0 create <queue> <n> (<task_type> <payload>){n} [option value]...
     FCALL <ns>_batch 0 add <batch_id> <queue> <n> (<task_type> <payload>){n} [option value]...
     FCALL <ns>_batch 0 close <batch_id>
create: a batch and its members (the batch's callbacks go to <queue>); options batch_id
(else minted b-<ms>-<n>), on_success / on_complete (a task type) with on_success_payload /
on_complete_payload (a JSON object), open 1 (members may be added until a close; default:
closed), description; and the members' priority, max_attempts, timeout_ms, delay_ms,
ttl_seconds, limit_key. Replies {batch_id, member ids...}.
add: members joined to a batch not yet complete (open, or closed with members still
running: "jobs within jobs"). Replies the ids.
close: no member is added by the batch's creator any more; the batch completes once nothing
is pending (maybe in this call). Replies 'closed', or 'complete'. ]]
local function batch_fn(keys, args)
  local verb = args[1]
  local c = load_config()
  local ms = now_ms()
  if verb == 'close' then
    local bid = args[2]
    if #args ~= 2 or not BATCH.valid_id(bid) then return opt_error('close takes a batch id') end
    local bkey = BATCH.key(bid)
    local st = redis.call('HMGET', bkey, 'state')[1] -- (HMGET: what a producer holds)
    if not st then return BATCH.join_refusal(bid, 0) end
    if st ~= 'closed' then redis.call('HSET', bkey, 'state', 'closed', 'closed_at', fmt(ms)) end
    BATCH.check(c, ms, bid)
    return redis.call('HEXISTS', bkey, 'completed_at') == 1 and 'complete' or 'closed'
  end
  local create = verb == 'create'
  if not create and verb ~= 'add' then
    return opt_error('the first argument is create, add or close')
  end
  local bid, queue, at = nil, args[2], 3
  if not create then bid, queue, at = args[2], args[3], 4 end
  local list, after = read_group(c, queue, args, at)
  if not list then return after end
  local own, rest = split_options(args, after, create and BATCH_OPTIONS or ADD_OPTIONS)
  if not own then return opt_error(rest) end
  local o, oerr = enqueue_options(c, rest, 1, false)
  if not o then return opt_error(oerr) end
  local fields = {}
  if create then
    bid = own.batch_id
    if bid ~= nil and not BATCH.valid_id(bid) then
      return opt_error('batch_id must match [A-Za-z0-9._:-]{1,' .. fmt(BATCH.ID_MAX) .. '}')
    end
    if bid and redis.call('EXISTS', BATCH.key(bid)) == 1 then
      return redis.error_reply('ID_EXISTS batch ' .. bid .. ' exists')
    end
    for _, which in ipairs({'on_success', 'on_complete'}) do
      if own[which] then
        local spec, why = BATCH.callback_spec(which, own[which], own[which .. '_payload'])
        if not spec then return opt_error(why) end
        fields[#fields + 1], fields[#fields + 2] = which, spec
      elseif own[which .. '_payload'] then
        return opt_error(which .. '_payload needs ' .. which)
      end
    end
    if own.open and own.open ~= '0' and own.open ~= '1' then return opt_error('open must be 0 or 1') end
    if own.description then
      if #own.description > DESCRIPTION_MAX then
        return opt_error('description must be at most ' .. fmt(DESCRIPTION_MAX) .. ' bytes')
      end
      fields[#fields + 1], fields[#fields + 2] = 'description', own.description
    end
    if not bid then bid = 'b-' .. fmt(ms) .. '-' .. fmt(seq_incr(1)) end
  else
    if not BATCH.valid_id(bid) then return opt_error('add takes a batch id') end
    local refusal = BATCH.join_refusal(bid, #list)
    if refusal then return refusal end
  end
  local ids, err = write_group(c, ms, queue, list, o, function(_, _, tkey)
    redis.call('HSET', tkey, 'batch', bid)
  end)
  if not ids then return err end
  if create then
    redis.call('HSET', BATCH.key(bid), 'id', bid, 'queue', queue, 'state',
               own.open == '1' and 'open' or 'closed', 'total', '0', 'pending', '0',
               'succeeded', '0', 'failed', '0', 'dead_lettered', '0', 'created_at', fmt(ms),
               unpack(fields))
    if own.open ~= '1' then redis.call('HSET', BATCH.key(bid), 'closed_at', fmt(ms)) end
    redis.call('ZADD', BATCH.index_key(), fmt(ms), bid)
    -- the index's oldest entries whose batch has expired go (a few per create: bounded)
    for _, old in ipairs(redis.call('ZRANGE', BATCH.index_key(), 0, 9)) do
      if redis.call('EXISTS', BATCH.key(old)) == 0 then redis.call('ZREM', BATCH.index_key(), old) end
    end
  end
  BATCH.joined(bid, #ids)
  BATCH.check(c, ms, bid)
  if create then table.insert(ids, 1, bid) end
  return ids
end

--[[ FCALL_RO <ns>_batch_show 0 <batch_id>: the batch as JSON {id, queue, state, total,
pending, succeeded, failed, dead_lettered, progress (0-1: the ended members, and the
fractions the running ones last reported), created_at, closed_at, completed_at,
description, on_success {task_type, task_id}, on_complete {...}, failed_ids (sorted, at
most FAILED_IDS_MAX), failed_ids_truncated}; NOT_FOUND when there is none. ]]
local function batch_show(keys, args)
  local bid = args[1]
  if not BATCH.valid_id(bid) then return opt_error('batch_show takes a batch id') end
  local raw = redis.call('HGETALL', BATCH.key(bid))
  if #raw == 0 then return BATCH.join_refusal(bid, 0) end
  local b = {}
  for i = 1, #raw, 2 do b[raw[i]] = raw[i + 1] end
  local out = {id = bid, queue = b.queue, state = b.state, description = b.description}
  for _, f in ipairs({'total', 'pending', 'succeeded', 'failed', 'dead_lettered', 'created_at',
                      'closed_at', 'completed_at'}) do
    out[f] = tonumber(b[f])
  end
  -- how far it got: the ended members whole, the running ones by what they last reported
  local running = 0
  for _, f in ipairs(redis.call('HVALS', BATCH.progress_key(bid))) do
    running = running + (tonumber(f) or 0)
  end
  local total = out.total or 0
  out.progress = total > 0 and math.min(1, (total - (out.pending or 0) + running) / total) or 1
  for _, which in ipairs({'on_success', 'on_complete'}) do
    if b[which] then
      local ok, spec = pcall(cjson.decode, b[which])
      out[which] = {task_type = ok and spec.task_type or nil,
                    task_id = b[which == 'on_success' and 'success_task' or 'complete_task']}
    end
  end
  local fkey = BATCH.failed_key(bid)
  local nfailed = redis.call('SCARD', fkey)
  local failed = nfailed <= BATCH.FAILED_IDS_MAX and redis.call('SMEMBERS', fkey) or
                 redis.call('SRANDMEMBER', fkey, BATCH.FAILED_IDS_MAX)
  table.sort(failed)
  out.failed_ids = failed
  out.failed_ids_truncated = nfailed > BATCH.FAILED_IDS_MAX
  return (cjson.encode(out):gsub('"failed_ids":{}', '"failed_ids":[]'))
end


--[[ FCALL_RO <ns>_batch_list 0 [count]: the newest batches (<p>:batches, by creation time;
count 1-LIST_MAX, default 50) as JSON {batches: [{id, queue, state, total, pending,
succeeded, failed, dead_lettered, created_at, completed_at, description}], more}; a batch
whose keys have expired is left out (its index entry stays until a batch create prunes). ]]
local function batch_list(keys, args)
  local count = args[1] and parse_int(args[1], 1, LIST_MAX) or 50
  if not count then return opt_error('count must be an integer in [1, ' .. fmt(LIST_MAX) .. ']') end
  local ids = redis.call('ZREVRANGE', BATCH.index_key(), 0, count)
  local out, more = {}, #ids > count
  for i = 1, math.min(#ids, count) do
    local v = redis.call('HMGET', BATCH.key(ids[i]), 'queue', 'state', 'total', 'pending',
                         'succeeded', 'failed', 'dead_lettered', 'created_at', 'completed_at',
                         'description')
    if v[1] then
      out[#out + 1] = {id = ids[i], queue = v[1], state = v[2] or nil, total = tonumber(v[3]),
                       pending = tonumber(v[4]), succeeded = tonumber(v[5]),
                       failed = tonumber(v[6]), dead_lettered = tonumber(v[7]),
                       created_at = tonumber(v[8]), completed_at = tonumber(v[9]),
                       description = v[10] or nil}
    end
  end
  if #out == 0 then return '{"batches":[],"more":' .. tostring(more) .. '}' end
  return cjson.encode({batches = out, more = more})
end

local CHAIN_OPTIONS = {after = true, on_failure = true}

--[[ FCALL <ns>_chain 0 <queue> <n> (<task_type> <payload>){n} [option value]...: n tasks,
each waiting for the one before (lib/deps.lua), so each runs when the one before has
succeeded and gets its result in parent_results. Options: after (the ids the first task
waits for), on_failure (every link's; default cancel: a link that fails ends the rest), and
the tasks' priority, max_attempts, timeout_ms, ttl_seconds, limit_key. Replies the ids, in
order. ]]
local function chain(keys, args)
  local c = load_config()
  local queue = args[1]
  local list, after = read_group(c, queue, args, 2)
  if not list then return after end
  local own, rest = split_options(args, after, CHAIN_OPTIONS)
  if not own then return opt_error(rest) end
  local o, oerr = enqueue_options(c, rest, 1, false)
  if not o then return opt_error(oerr) end
  if o.delay_ms and o.delay_ms > 0 then return opt_error('delay_ms is refused in a chain') end
  if own.on_failure and not DEPS.ON_FAILURE[own.on_failure] then
    return opt_error('on_failure must be cancel, run or dead_letter')
  end
  local first
  if own.after then
    local why
    first, why = DEPS.parse_after(own.after)
    if not first then return opt_error(why) end
    local refusal = DEPS.refusal(first)
    if refusal then return refusal end
  end
  local ms = now_ms()
  -- every link but the first (without `after`) is written waiting, then wired in order
  local waiting = {priority = o.priority, max_attempts = o.max_attempts,
                   timeout_ms = o.timeout_ms, ttl_seconds = o.ttl_seconds,
                   limit_key = o.limit_key, after = true}
  local ids, err = write_group(c, ms, queue, list, o, function(i)
    if i > 1 or first then return waiting end
  end)
  if not ids then return err end
  -- each link but the first after the link before, which this call wrote and has not
  -- ended; then the first after its given parents (read: they may have ended, and then it
  -- ends here, with the rest waiting for it already: its end settles them at the call's
  -- end, lib/deps.lua)
  for i = #ids, 1, -1 do
    local parents = i == 1 and first and table.concat(first, ',') or ids[i - 1]
    if i > 1 or first then
      local tkey = k('task', ids[i])
      local on_failure = own.on_failure or 'cancel'
      redis.call('HSET', tkey, 'after', parents, 'on_failure', on_failure,
                 'deps_pending', i > 1 and '1' or fmt(#first))
      if i == 1 then
        DEPS.wire(c, ms, tkey, read_task(tkey, ids[i]))
      else
        DEPS.wire_fresh(c, ms, tkey, {id = ids[i], queue = queue, task_type = list[i][1],
                                      attempt = '1', status = 'waiting',
                                      priority = fmt(o.priority)}, ids[i - 1])
      end
    end
  end
  return ids
end

reg('batch', batch_fn)
reg('batch_show', batch_show, true)
reg('batch_list', batch_list, true)
reg('chain', chain)
