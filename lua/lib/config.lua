-- lua/lib/config.lua
-- The limits the daemon published in <prefix>:config, parsed and checked against the
-- C side's bounds.
local CONFIG_BOUNDS, CONFIG_NAMES, DEFAULTS =
  CONST.CONFIG_BOUNDS, CONST.CONFIG_NAMES, CONST.DEFAULTS
local k =
  scope.k

-- What load_config() accepts from <prefix>:config: CONFIG_BOUNDS, the bounds of the key
-- table in src/config.c (dlq_enabled is its boolean as 0/1, default_priority a band).
local EVENT_LEVELS = {all = true, terminal = true, off = true}

-- The limits the daemon published in <prefix>:config, with defaults for a fresh Redis. A
-- value that is not a plain integer within CONFIG_BOUNDS (or an events level), or a config
-- key of another type, is not trusted: that field takes its DEFAULTS value. CONFIG_NAMES
-- lists the fields read.
-- What an enqueue reads of it (see enqueue_config): every other field is nil there.
local ENQUEUE_CONFIG_NAMES = {'max_payload_bytes', 'max_queue_depth', 'default_priority',
                              'idem_ttl_s', 'events', 'events_stream_maxlen'}
-- Per list of names, the last config parsed and the raw values it came from. Checking the
-- values costs far less than parsing them again (Lua strings are interned: equal strings
-- are one object); a single-task enqueue spent a third of its time here before. Nothing is
-- trusted from an earlier call: the hash is read every time, only the parse is skipped.
local config_raw, config_parsed = {}, {}

local function read_config(names)
  local vals = redis.pcall('HMGET', k('config'), unpack(names))
  if vals.err then vals = {} end
  local raw = config_raw[names]
  if raw then
    local same = true
    for i = 1, #names do
      if vals[i] ~= raw[i] then same = false break end
    end
    if same then return config_parsed[names] end
  end
  local c = {}
  for i, name in ipairs(names) do
    local v, b = vals[i], CONFIG_BOUNDS[name]
    if name == 'events' then
      if not EVENT_LEVELS[v] then v = DEFAULTS.events end
    else
      v = type(v) == 'string' and v:find('^%d+$') and tonumber(v) or nil
      if not v or v < b[1] or v > b[2] then v = DEFAULTS[name] end
    end
    c[name] = v
  end
  config_raw[names], config_parsed[names] = vals, c
  return c
end

local function load_config() return read_config(CONFIG_NAMES) end

-- The limits an enqueue applies, read alone: six fields instead of eleven, on the path
-- where one task is one call.
local function enqueue_config() return read_config(ENQUEUE_CONFIG_NAMES) end

return {enqueue_config = enqueue_config, load_config = load_config}
