-- lua/lib/view.lua
-- What the read model's Functions share: queue counts, its bounds (READ) and JSON
-- rendering.
local BANDS, GROUP =
  CONST.BANDS, CONST.GROUP
local stream_key =
  streams.stream_key

--[[ The counts of a queue's ten streams, the one definition every reader uses (stats,
overview, queue_view): per band its length (XLEN) and pending count (XPENDING of the
group), a missing stream, a key of another type or a stream without the group counting 0;
per band depth = max(0, length - pending), and the queue's depth the sum of those. ]]
local function queue_counts(q)
  local r = {len = {}, pend = {}, depth_by_band = {}, length = 0, pending = 0, depth = 0}
  for band = 0, BANDS - 1 do
    local s, l, p = stream_key(q, band), 0, 0
    if redis.call('EXISTS', s) == 1 then
      local n = redis.pcall('XLEN', s)
      if type(n) == 'number' then l = n end
      local ok, x = pcall(redis.call, 'XPENDING', s, GROUP)
      if ok then p = x[1] end
    end
    local d = math.max(0, l - p)
    r.len[band], r.pend[band], r.depth_by_band[band] = l, p, d
    r.length, r.pending, r.depth = r.length + l, r.pending + p, r.depth + d
  end
  return r
end
local READ = { -- the bounds of the read model
  QUEUES_MAX = 1000,    -- queues, and workers, that one overview or workers reports
  SCHEDULE_SCAN = 1000, -- schedule members an overview counts per queue
  LIST_MAX = 200,       -- waiting, and running, entries of a queue_view
  PAGE_MAX = 500,       -- entries of a dead_letters or audit_page page
  SCAN_MAX = 10000,     -- entries a filtered page or a task's event search examines
  FIELD_MAX = 2048,     -- bytes of a value a page shows, by default
  FILTER_PAGE = 500,    -- entries read per XRANGE by a filtered page
  EVENTS_PAGE = 1000,   -- events read per XREVRANGE by task_view
  DLQ_SCAN = 1000,      -- dead letters (the newest) a metrics call counts by queue and class
  DLQ_PAGE = 100,       -- dead letters read per XREVRANGE by metrics
}

--[[ cjson (Redis 7.0) encodes an empty table as {} and cannot embed JSON text as it is.
Both are marked by a one-key object whose key begins with a NUL byte, put in place in the
encoded text: {"\u0000dtq":0} becomes [], {"\u0000dtq":<i>} the JSON text raws[i]. No
object built here has such a key with a number (names are valid names; hash and stream
values are strings), and decoded JSON that holds a NUL is not decoded (json_decode). ]]
local MARK = '\0dtq'
local EMPTY_ARRAY = {[MARK] = 0}
local function arr(t)
  if next(t) == nil then return EMPTY_ARRAY end
  return t
end

local function json_encode(v, raws)
  return (cjson.encode(v):gsub('{"\\u0000dtq":(%d+)}', function(i)
    if i == '0' then return '[]' end
    return raws[tonumber(i)]
  end))
end

-- JSON text from Redis (a result, an event) decoded, or nil: not JSON as RFC 8259 writes
-- numbers (cjson would take 0x10, inf, nan), or holding a NUL (which could forge a mark).
local function json_decode(text)
  if text:find('\0', 1, true) or text:find('\\u0000', 1, true) then return nil end
  cjson.decode_invalid_numbers(false)
  local ok, v = pcall(cjson.decode, text)
  cjson.decode_invalid_numbers(true)
  if ok then return v end
  return nil
end

-- Whether JSON text json_decode took can be embedded as it is: cjson also takes raw
-- control characters in strings and numbers such as 1. or -.5, which JSON does not.
local function json_verbatim(text)
  local bad = false
  local t = text:gsub('\\.', '') -- escapes out: the quotes left pair up
  t = t:gsub('"[^"]*"', function(s)
    if s:find('[%z\1-\31]') then bad = true end
    return '0'
  end)
  return not bad and not t:find('%D%.') and not t:find('^%.') and not t:find('%.%D') and
         not t:find('%.$')
end

-- strtoll's reading of a hash value: its leading integer, 0 when there is none.
local function int_of(v)
  return tonumber(type(v) == 'string' and v:match('^%s*([-+]?%d+)') or '') or 0
end

local function id_ms(id) return tonumber(id:match('^(%d+)')) or 0 end

-- A stream id <ms>-<seq> or <ms>, as clients pass cursors.
local function valid_stream_id(s)
  return type(s) == 'string' and (s:match('^%d+$') or s:match('^%d+%-%d+$')) ~= nil and
         #s <= 41
end

-- The integer reply of a read, 0 for a key of another type.
local function count_of(...)
  local n = redis.pcall(...)
  return type(n) == 'number' and n or 0
end

-- The group's last-delivered id of a stream, nil when it has no group.
local function last_delivered(s)
  local ok, groups = pcall(redis.call, 'XINFO', 'GROUPS', s)
  if not ok then return nil end
  for _, g in ipairs(groups) do
    local f = {}
    for i = 1, #g - 1, 2 do f[g[i]] = g[i + 1] end
    if f.name == GROUP then return f['last-delivered-id'] end
  end
  return nil
end

return {MARK = MARK, READ = READ, arr = arr, count_of = count_of, id_ms = id_ms,
        int_of = int_of, json_decode = json_decode, json_encode = json_encode,
        json_verbatim = json_verbatim, last_delivered = last_delivered,
        queue_counts = queue_counts, valid_stream_id = valid_stream_id}
