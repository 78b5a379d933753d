-- lua/fn/limit.lua
-- FCALL <ns>_limit_set, <ns>_limit_remove and <ns>_limit_list (the machinery is
-- lua/lib/limits.lua).
local fmt, hgetall_map, is_name, NAME_RULE, now_ms, opt_error, parse_int =
  util.fmt, util.hgetall_map, util.is_name, util.NAME_RULE, util.now_ms, util.opt_error,
  util.parse_int
local SCOPE, k =
  scope.SCOPE, scope.k
local reg =
  call.reg
local audit =
  events.audit
local LIMIT, decode_limit, lkey =
  limits.LIMIT, limits.decode_limit, limits.lkey
local arr, count_of, json_encode =
  view.arr, view.count_of, view.json_encode

-- The admin Functions

-- The target's field and name from <queue> <task_type or ''>, or nil and the error reply.
local function target_of(q, ttype)
  if not is_name(q) then
    return nil, opt_error('queue name must match ' .. NAME_RULE)
  end
  if ttype == nil or ttype == '' then return '*', q end
  if not is_name(ttype) then
    return nil, opt_error('task_type must match ' .. NAME_RULE)
  end
  return 't:' .. ttype, q .. ':' .. ttype
end

local SET_OPTS = {rate = {1, LIMIT.RATE_MAX}, period_ms = {1, LIMIT.PERIOD_MAX},
                  burst = {0, LIMIT.BURST_MAX}, concurrency = {1, LIMIT.CONCURRENCY_MAX},
                  per_key = {0, 1}}

--[[ FCALL <ns>_limit_set 0 <actor> <queue> <task_type or ''> [option value]...
Options: rate N and period_ms P (together: at most N + burst starts in any period), burst
B (with a rate; default 0), concurrency C (at most C running), per_key 0|1 (each
limit_key apart). At least one of rate and concurrency. Replaces the target's limit;
replies 'set'. ]]
local function limit_set(keys, args)
  local actor, q, ttype = args[1], args[2], args[3]
  local field, target = target_of(q, ttype)
  if not field then return target end
  local bad = SCOPE.refuse(q)
  if bad then return bad end
  if (#args - 3) % 2 ~= 0 then return opt_error('options come in name value pairs') end
  local o = {}
  for i = 4, #args, 2 do
    local name, v = args[i], args[i + 1]
    local lim = SET_OPTS[name]
    if not lim then return opt_error('unknown option ' .. tostring(name)) end
    local n = parse_int(v, lim[1], lim[2])
    if not n then
      return opt_error(name .. ' must be an integer in [' .. fmt(lim[1]) .. ', ' ..
                       fmt(lim[2]) .. ']')
    end
    o[name] = n
  end
  if (o.rate == nil) ~= (o.period_ms == nil) then
    return opt_error((o.rate and 'rate' or 'period_ms') .. ' needs ' ..
                     (o.rate and 'period_ms' or 'rate'))
  end
  if o.burst and not o.rate then return opt_error('burst needs rate') end
  if not o.rate and not o.concurrency then
    return opt_error('give rate (with period_ms) or concurrency, or both')
  end
  if o.rate and o.period_ms * 1000 < o.rate then
    return opt_error('rate must be at most 1000 per ms of period_ms')
  end
  local l = {per_key = o.per_key == 1}
  if o.rate then l.rate, l.period_ms, l.burst = o.rate, o.period_ms, o.burst or 0 end
  l.concurrency = o.concurrency
  local text = cjson.encode(l)
  redis.call('HSET', k('limits', q), field, text)
  redis.call('SADD', k('limits'), q)
  audit('limit_set', '', actor, now_ms(), q, {'target', target, 'limit', text})
  return 'set'
end

--[[ FCALL <ns>_limit_remove 0 <actor> <queue> <task_type or ''>: the target's limit goes
(NOT_FOUND when it has none); its state runs out by itself (rate and horizon keys expire,
slots are given back as their attempts end). Replies 'removed'. ]]
local function limit_remove(keys, args)
  local actor, q, ttype = args[1], args[2], args[3]
  local field, target = target_of(q, ttype)
  if not field then return target end
  local bad = SCOPE.refuse(q)
  if bad then return bad end
  local lk = k('limits', q)
  if redis.pcall('HDEL', lk, field) ~= 1 then
    return redis.error_reply('NOT_FOUND no limit on ' .. target)
  end
  if redis.call('EXISTS', lk) == 0 then redis.call('SREM', k('limits'), q) end
  audit('limit_remove', '', actor, now_ms(), q, {'target', target})
  return 'removed'
end

-- The use of limit l of queue q now: {running, tokens_left, keys, deferred_until_ms}.
local function limit_use(q, l, now)
  local use = {running = cjson.null, tokens_left = cjson.null, keys = cjson.null,
               deferred_until_ms = cjson.null}
  local function card(key) return count_of('ZCARD', key) end
  if l.per_key then
    local ik = lkey(q, l.field, 'keys')
    use.keys = card(ik)
    if l.concurrency then
      local ids = redis.pcall('ZRANGE', ik, 0, LIMIT.KEYS_MAX - 1)
      local n = 0
      if not ids.err then
        for _, key in ipairs(ids) do n = n + card(lkey(q, l.field, 'run', key)) end
      end
      use.running = n
    end
    return use
  end
  if l.concurrency then use.running = card(lkey(q, l.field, 'run')) end
  if l.rate then
    local tat = tonumber(redis.pcall('GET', lkey(q, l.field, 'rate'))) or 0
    local left = math.floor((now * 1000 + 999 + l.tol - tat) / l.T) + 1
    use.tokens_left = math.max(0, math.min(l.burst + 1, left))
  end
  local hz = tonumber(redis.pcall('GET', lkey(q, l.field, 'due')))
  if hz and hz > now * 1000 then use.deferred_until_ms = math.ceil(hz / 1000) end
  return use
end

--[[ FCALL_RO <ns>_limit_list 0: one JSON text, the limits of the queues in <p>:limits
(sorted, at most QUEUES_MAX; per queue the queue-wide limit first, then by task type, at
most TARGETS_MAX), each {queue, task_type (null: queue-wide), target, rate, period_ms,
burst, concurrency (null when not set), per_key, use}: an array. ]]
local function limit_list(keys, args)
  local now = now_ms()
  local names = redis.pcall('SMEMBERS', k('limits'))
  if names.err then names = {} end
  table.sort(names)
  local out = {}
  for i = 1, math.min(#names, LIMIT.QUEUES_MAX) do
    local q = names[i]
    local map = is_name(q) and hgetall_map(k('limits', q))
    local fields = {}
    for f in pairs(map or {}) do fields[#fields + 1] = f end
    table.sort(fields) -- '*' sorts before 't:...'
    for j = 1, math.min(#fields, LIMIT.TARGETS_MAX) do
      local f = fields[j]
      local l, ttype = decode_limit(map[f]), f:match('^t:(.+)$')
      if l and (f == '*' or ttype) then
        local t = {field = f}
        for name, v in pairs(l) do t[name] = v end
        out[#out + 1] = {queue = q, task_type = ttype or cjson.null,
                         target = ttype and (q .. ':' .. ttype) or q,
                         rate = l.rate or cjson.null, period_ms = l.period_ms or cjson.null,
                         burst = l.rate and l.burst or cjson.null,
                         concurrency = l.concurrency or cjson.null, per_key = l.per_key,
                         use = limit_use(q, t, now)}
      end
    end
  end
  return json_encode(arr(out))
end

reg('limit_set', limit_set)
reg('limit_remove', limit_remove)
reg('limit_list', limit_list, true)

