-- lua/fn/namespace.lua
-- FCALL_RO <ns>_version and FCALL <ns>_layout: the library's version and the
-- namespace's layout marker.
local opt_error =
  util.opt_error
local SCOPE, k =
  scope.SCOPE, scope.k
local reg =
  call.reg

--[[ FCALL_RO <ns>_version 0: the library's version marker, <DTQ_VERSION>-<hash of the
library text> (scripts.c). A worker that may not FUNCTION LOAD checks it against its own
before serving on a library an admin installed (dtqctl functions install). ]]
local function version(keys, args) return VERSION end
reg('version', version, true)

--[[ FCALL <ns>_layout 0 single, or FCALL <ns>_layout 1 {<ns>} cluster: the caller's layout
(docs/reference.md 5.9), checked against the namespace's marker <prefix>:layout and written
when there is none. A namespace keeps the layout it was created with: the other one would
not find its keys. A cluster-layout call also refuses a namespace without a marker that
holds {<ns>}:config, which only the single layout writes (cluster_hash_tag on a cluster).
Replies 'single' or 'cluster'; WRONG_LAYOUT with the way to move otherwise. ]]
local MOVE = ' To move: stop the producers, let the daemons of the old layout drain the queues, ' ..
             'then start everything with the new URL (or use another namespace); see ' ..
             'docs/reference.md 5.9.'
local function layout(keys, args)
  local want = args[1]
  if want ~= 'single' and want ~= 'cluster' then
    return opt_error('the argument must be single or cluster')
  end
  if (want == 'cluster') ~= SCOPE.cluster or SCOPE.queue then
    return opt_error('single takes no key, cluster the key {' .. NS .. '}')
  end
  local key = k('layout')
  local have = redis.pcall('GET', key)
  if type(have) == 'table' then
    return redis.error_reply('WRONG_LAYOUT ' .. key .. ' holds a ' ..
                             redis.call('TYPE', key).ok .. ', not the layout marker')
  end
  if not have and want == 'cluster' and redis.call('EXISTS', k('config')) == 1 then
    have = 'single'
  end
  if have and have ~= want then
    local what = have == 'cluster' and 'Redis Cluster (redis-cluster:// URLs)' or
                 (have == 'single' and 'a single Redis (with cluster_hash_tag on a cluster)' or
                  ('an unknown layout \'' .. have .. '\''))
    return redis.error_reply('WRONG_LAYOUT namespace ' .. NS .. ' is laid out for ' .. what ..
                             ', this client for ' ..
                             (want == 'cluster' and 'Redis Cluster.' or 'a single Redis.') .. MOVE)
  end
  -- A namespace without a marker gets the caller's, when the caller may write it: the
  -- producer role may only read it (a producer that could SET it could stop every daemon),
  -- and its dtqctl calls this before its first write; it is not refused for that.
  if not have and redis.acl_check_cmd('SET', key, want) then redis.call('SET', key, want) end
  return want
end
reg('layout', layout)

