-- lua/lib/policy.lua
-- The handler policy the daemon sends: max_attempts and timeout_ms resolved at claim.
local DEFAULTS =
  CONST.DEFAULTS

--[[ The one place max_attempts and timeout_ms are resolved: at claim, from the task's own
value, else its handler section's (the policy table the daemon sends), else the defaults.
The result is written into the hash; finish, handback and the reaper read it from there.
own_ma and own_to are the task's own values as stored (nil: none). ]]
local function resolve(policy, ttype, own_ma, own_to)
  local per = policy.t[ttype]
  local ma = (own_ma and tonumber(own_ma)) or (per and per[1]) or policy.d[1]
  local to = (own_to and tonumber(own_to)) or (per and per[2]) or policy.d[2]
  return ma, to
end

local function decode_policy_json(json)
  local ok, p = pcall(cjson.decode, json or '')
  if not ok or type(p) ~= 'table' or type(p.d) ~= 'table' then
    return {d = {DEFAULTS.default_max_attempts, DEFAULTS.default_timeout_ms}, t = {}}
  end
  if type(p.t) ~= 'table' then p.t = {} end
  return p
end

-- The last policy decoded, by its JSON text: a daemon sends the same text with every call
-- until its config changes, and the table is only read.
local policy_json, policy_decoded = nil, nil

local function decode_policy(json)
  if json ~= nil and json == policy_json then return policy_decoded end
  local p = decode_policy_json(json)
  policy_json, policy_decoded = json, p
  return p
end

return {decode_policy = decode_policy, resolve = resolve}
