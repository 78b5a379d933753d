-- lua/lib/util.lua
-- Pure helpers every module uses: integers as Redis strings (fmt), the server clock
-- (now_ms, iso), hashes as tables, names and their rules (is_name, NAME_RULE), numbers,
-- stream ids, a first line, and the INVALID_ARGUMENT reply.


-- Integers as Redis strings. string.format costs about 2,000 server instructions a call
-- and a fetch or finish formats the same few numbers (the call's clock, attempts, limits)
-- for every task, so what was formatted is kept: a bounded memo (started afresh when full),
-- whose answers depend on the number alone. 256: the numbers a call repeats (attempts,
-- limits, its clock) fit, and the memo stays small for the garbage collector, which marks
-- it at every cycle (4096 entries cost a single enqueue 3%: bench/fn_cost.sh CALLGRIND=1).
local fmt_memo, fmt_memo_n = {}, 0
local function fmt(n)
  local s = fmt_memo[n]
  if s then return s end
  s = string.format('%d', n)
  if n == n then -- NaN cannot be a table key
    if fmt_memo_n >= 256 then fmt_memo, fmt_memo_n = {}, 0 end
    fmt_memo[n], fmt_memo_n = s, fmt_memo_n + 1
  end
  return s
end

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- The date part of iso() for the last day asked: the civil-date arithmetic runs once a day.
local iso_day, iso_date = nil, nil

local function iso(ms)
  local s = math.floor(ms / 1000)
  local days, rem = math.floor(s / 86400), s % 86400
  if days == iso_day then
    return string.format('%s%02d:%02d:%02d.%03dZ', iso_date, math.floor(rem / 3600),
                         math.floor(rem % 3600 / 60), rem % 60, ms % 1000)
  end
  local z = days + 719468
  local era = math.floor(z / 146097)
  local doe = z - era * 146097
  local yoe = math.floor((doe - math.floor(doe / 1460) + math.floor(doe / 36524)
                          - math.floor(doe / 146096)) / 365)
  local doy = doe - (365 * yoe + math.floor(yoe / 4) - math.floor(yoe / 100))
  local mp = math.floor((5 * doy + 2) / 153)
  local d = doy - math.floor((153 * mp + 2) / 5) + 1
  local m = mp < 10 and mp + 3 or mp - 9
  local y = yoe + era * 400 + (m <= 2 and 1 or 0)
  iso_day, iso_date = days, string.format('%04d-%02d-%02dT', y, m, d)
  return iso(ms)
end

-- HGETALL as a Lua table, nil when there is no such key; or nil and the error reply of
-- redis.pcall. In RESP3 Redis hands a hash over as a map it builds itself: about a third
-- cheaper than pairing up the RESP2 array here. Only this call speaks RESP3 (elsewhere
-- HMGET's missing fields stay false, not nil).
local function hgetall_map(key)
  redis.setresp(3)
  local r = redis.pcall('HGETALL', key)
  redis.setresp(2)
  if r.err then return nil, r end
  if next(r.map) == nil then return nil end
  return r.map
end

local function hgetall(key)
  local h, err = hgetall_map(key)
  if err then error(err) end -- as redis.call raises it
  return h
end

-- Whether s is a name of at most max bytes of [A-Za-z0-9._:-].
local function valid_name(s, max)
  return type(s) == 'string' and #s >= 1 and #s <= max and not s:find('[^%w%._:%-]')
end

-- The rules of queue names and task types, and of task ids, as error messages say them;
-- their bounds are the C side's (CONST.NAME_MAX, CONST.ID_MAX).
local NAME_RULE = '[A-Za-z0-9._:-]{1,' .. CONST.NAME_MAX .. '}'
local ID_RULE = '[A-Za-z0-9._:-]{1,' .. CONST.ID_MAX .. '}'

-- Whether s is a queue name or a task type (NAME_RULE), remembered across calls for a
-- bounded number of strings: every task of a fetch, a finish or an enqueue asks it of the
-- same few names, and the answer depends on the string alone.
local name_memo, name_memo_n = {}, 0
local function is_name(s)
  local ok = name_memo[s]
  if ok == nil and type(s) == 'string' then
    ok = valid_name(s, CONST.NAME_MAX)
    if name_memo_n >= 1024 then name_memo, name_memo_n = {}, 0 end
    name_memo[s] = ok
    name_memo_n = name_memo_n + 1
  end
  return ok == true
end

-- Whether s is a task id (ID_RULE).
local function is_task_id(s) return valid_name(s, CONST.ID_MAX) end

-- tonumber(s), with the strings '1' .. '1024' (attempts, the usual counts) looked up: each
-- tonumber of a string is a strtod, and finish compares a few per task. The table is made
-- by the first call that asks (the standard library is out of reach while the library
-- loads) and kept: constants.
local num
do
  local small = nil
  num = function(s)
    if not small then
      small = {}
      for i = 1, 1024 do small[string.format('%d', i)] = i end
    end
    return small[s] or tonumber(s)
  end
end

-- Appends to the list `a` each name-value pair (given flat after it) whose value is set:
-- the options a task was given, as command arguments. Returns `a`.
local function options_set(a, ...)
  local n = select('#', ...)
  for i = 1, n, 2 do
    local v = select(i + 1, ...)
    if v then
      a[#a + 1] = select(i, ...)
      a[#a + 1] = v
    end
  end
  return a
end

local function parse_int(s, lo, hi)
  if type(s) ~= 'string' or not s:match('^%-?%d+$') then return nil end
  local n = tonumber(s)
  if not n or n < lo or n > hi then return nil end
  return n
end
-- A stream id as two numbers, or nil when it is not one that fits them exactly.
local function split_id(id)
  local dash = id:find('-', 1, true)
  if not dash then return nil end
  local ms, seq = tonumber(id:sub(1, dash - 1)), tonumber(id:sub(dash + 1))
  if not ms or not seq or seq >= 2^53 or ms >= 2^53 then return nil end
  return ms, seq
end

-- The first line of `s`, at most `max` bytes (not cutting a UTF-8 character), and whether
-- anything was cut.
local function first_line(s, max)
  s = type(s) == 'string' and s or ''
  local cut = false
  local nl = s:find('[\r\n]')
  if nl then s, cut = s:sub(1, nl - 1), true end
  if #s > max then
    s, cut = s:sub(1, max), true
    if s:byte(#s) >= 128 then s = s:gsub('[\192-\255][\128-\191]*$', '') end
  end
  return s, cut
end

local function opt_error(msg) return redis.error_reply('INVALID_ARGUMENT ' .. msg) end

return {first_line = first_line, fmt = fmt, hgetall = hgetall, hgetall_map = hgetall_map,
        ID_RULE = ID_RULE, is_name = is_name, is_task_id = is_task_id, iso = iso,
        NAME_RULE = NAME_RULE, now_ms = now_ms, num = num, opt_error = opt_error,
        options_set = options_set, parse_int = parse_int, split_id = split_id,
        valid_name = valid_name}
