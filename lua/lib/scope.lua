-- lua/lib/scope.lua
-- The call's scope: the key prefix of every key (k), the layout (single, or a cluster
-- call's hash tag) and the refusal of a queue that is not the call's own.

-- The call's key prefix (SCOPE.prefix too; set by SCOPE.enter): an upvalue for k(), which
-- builds every key.
local prefix = PREFIX

-- <prefix>:a[:b[:c[:d]]], by plain concatenation (a varargs table per key costs more).
local function k(a, b, c, d)
  if d then return prefix .. ':' .. a .. ':' .. b .. ':' .. c .. ':' .. d end
  if c then return prefix .. ':' .. a .. ':' .. b .. ':' .. c end
  if b then return prefix .. ':' .. a .. ':' .. b end
  return prefix .. ':' .. a
end

--[[ The call's scope. Single layout: every key is <PREFIX>:..., PREFIX the namespace (or
{namespace} with cluster_hash_tag). Cluster layout (docs/reference.md 5.9): a call's first
key is a bare hash tag, {<ns>:<queue>} for a queue's calls or {<ns>} for global state; the
wrapper (reg) makes it the prefix of every key of the call and strips it, so a queue's call
sees a namespace that holds that one queue and touches its slot only. ]]
local SCOPE = {base = PREFIX, prefix = PREFIX, cluster = false, queue = nil}

-- The refusal of a queue that is not the call's own in the cluster layout (its keys would
-- land in the wrong slot, or be refused by the node): an error reply, or nil. The entry
-- points of the per-queue Functions return it before they write; stream_key raises it as
-- a last guard (SCOPE.check).
function SCOPE.refuse(q)
  if SCOPE.cluster and q ~= SCOPE.queue then
    return redis.error_reply('INVALID_ARGUMENT queue \'' .. tostring(q) ..
                             '\' is not the queue of the call\'s key ' .. prefix ..
                             ' (cluster layout: the first key is the queue\'s hash tag {' ..
                             NS .. ':<queue>})')
  end
  return nil
end
-- In the cluster layout, why a stream named by a finish or handback record is not one of
-- the call's queue (a record of another queue: its task id may name another task here);
-- nil when it is.
function SCOPE.foreign_stream(stream)
  if not SCOPE.cluster then return nil end
  local head = prefix .. ':stream:'
  if type(stream) ~= 'string' or stream:sub(1, #head) ~= head then
    return 'stream ' .. tostring(stream) .. ' is not a stream of the call\'s key ' .. prefix
  end
  return nil
end
function SCOPE.check(q)
  local bad = SCOPE.refuse(q)
  if bad then error(bad) end
end

-- Sets the scope from the call's keys (see above); answers an error text when the first
-- key is a tag of another namespace.
function SCOPE.enter(keys)
  local tag = keys[1]
  if tag and tag:byte(1) == 123 and tag:byte(-1) == 125 then -- '{' ... '}'
    local inner = tag:sub(2, -2)
    local q
    if inner == NS then
      q = false
    elseif inner:sub(1, #NS + 1) == NS .. ':' and #inner <= #NS + 129 and
        inner:find('^[A-Za-z0-9._:-]+$', #NS + 2) then -- a queue name: no braces
      q = inner:sub(#NS + 2)
    else
      return 'INVALID_ARGUMENT key ' .. tag .. ' is not a hash tag of namespace ' .. NS ..
             ' ({' .. NS .. '} or {' .. NS .. ':<queue>})'
    end
    table.remove(keys, 1)
    prefix, SCOPE.cluster, SCOPE.queue = tag, true, q
  else
    prefix, SCOPE.cluster, SCOPE.queue = SCOPE.base, false, nil
  end
  SCOPE.prefix = prefix
  return nil
end

return {SCOPE = SCOPE, k = k}
