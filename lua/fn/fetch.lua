-- lua/fn/fetch.lua
-- FCALL <ns>_fetch: new entries read in serving order and claimed.
local BANDS, GROUP =
  CONST.BANDS, CONST.GROUP
local fmt, is_name, now_ms =
  util.fmt, util.is_name, util.now_ms
local SCOPE =
  scope.SCOPE
local reg =
  call.reg
local load_config =
  config.load_config
local ensure_group, qlen_add, qlen_key, queue_known =
  streams.ensure_group, streams.qlen_add, streams.qlen_key, streams.queue_known
local decode_policy =
  policy.decode_policy
local LIM =
  limits.LIM
local LEAN =
  lean.LEAN
local FULL, process_entry =
  claim.FULL, claim.process_entry

--[[ FCALL <ns>_fetch numkeys KEYS ARGV
KEYS: for each served queue, its paused key then its BANDS streams p9..p0.
ARGV: worker_id, count, policy-json, then the queue names in KEYS order.
Reads up to `count` (at most FETCH_MAX) new entries in strict order (queue order, then p9
first), settles the ones that must not run and claims the rest (queued -> running). Returns
{claimed-tasks, block-streams, entries-read, lean-claims}; block-streams (stream, last-id
pairs) is filled only when nothing was read, for the daemon's XREAD BLOCK; entries-read is
-1 when a missing group was recreated and the daemon should fetch again at once;
lean-claims holds the plain lean entries' claims (LEAN.first), flat, a group per stream:
stream, queue, band, m, then m times entry_id, task_type, payload, max_attempts,
timeout_ms (the task id is <queue>:p<band>:<entry_id>, the attempt 1). ]]
-- The fetch KEYS layout, the same as the daemon's (dtq_streams_fetch_keys in src/streams.c).
local FETCH_KEYS_PER_QUEUE, TOP_BAND = BANDS + 1, BANDS - 1
local function fetch_paused_key(keys, qi) return keys[(qi - 1) * FETCH_KEYS_PER_QUEUE + 1] end
local function fetch_stream_key(keys, qi, band)
  return keys[(qi - 1) * FETCH_KEYS_PER_QUEUE + 2 + (TOP_BAND - band)]
end

local FETCH_MAX = 1000 -- entries read per fetch call at most, whatever count says

local function fetch(keys, args)
  local worker, policy = args[1], decode_policy(args[3])
  local count = math.min(tonumber(args[2]) or 0, FETCH_MAX)
  local c = load_config()
  local ms = now_ms()
  local claimed, lean, full, read, created = {}, {}, {}, 0, false
  local nq = #args - 3
  if SCOPE.cluster then
    for qi = 1, nq do
      local bad = SCOPE.refuse(args[3 + qi])
      if bad then return bad end
    end
  end
  for qi = 1, nq do
    local queue = args[3 + qi]
    if redis.call('EXISTS', fetch_paused_key(keys, qi)) == 0 then
      for band = TOP_BAND, 0, -1 do
        if read >= count then break end
        local stream = fetch_stream_key(keys, qi, band)
        local res = redis.pcall('XREADGROUP', 'GROUP', GROUP, worker, 'COUNT', count - read,
                                'STREAMS', stream, '>')
        if type(res) == 'table' and res.err then
          -- A deleted stream or group is repaired (recreated, read next time); a key of
          -- another type is skipped (recreating it would fail on every call); any other
          -- error goes back to the daemon, which logs it and backs off.
          if string.find(res.err, 'NOGROUP', 1, true) then
            ensure_group(stream)
            queue_known(queue) -- a removed queue (<ns>_queue_remove) a daemon serves again
            created = true
          elseif not string.find(res.err, 'WRONGTYPE', 1, true) then
            -- What was claimed already must reach the daemon; the error can wait a call.
            if read == 0 then return redis.error_reply(res.err) end
            return {claimed, {}, read, lean, full}
          end
          res = nil
        end
        if res then
          -- Entries no Function wrote (neither dtq's two fields nor a lean entry's marker)
          -- count from their first delivery, before any of them is settled (deleted) below.
          local list, raw = res[1][2], 0
          for j = 1, #list do
            local f = list[j][2]
            if not ((#f == 4 and f[1] == 'task_id' and f[3] == 'attempt') or f[1] == 'lean') then
              raw = raw + 1
            end
          end
          qlen_add(queue, raw)
          -- Lean entries of the plain shape take LEAN.first while the queue has no limits:
          -- their claims go in this stream's group of lean-claims.
          -- Full tasks of the usual case take FULL.first, the same way: claims' group.
          local plain, head, fhead = not LIM.of(queue) and is_name(queue), #lean, #full
          lean[head + 1], lean[head + 2], lean[head + 3], lean[head + 4] = stream, queue, band, 0
          full[fhead + 1], full[fhead + 2], full[fhead + 3] = stream, queue, 0
          for j = 1, #list do
            read = read + 1
            local e = list[j]
            local f, t = e[2], false
            if plain and #f == 4 and f[1] == 'task_id' and f[3] == 'attempt' then
              t = FULL.first(c, ms, worker, policy, stream, queue, band, e[1], f[2], f[4], full)
            elseif plain and f[1] == 'lean' and f[3] == 'task_type' and f[5] == 'payload' and
                #f == 6 then
              t = LEAN.first(c, ms, worker, policy, stream, queue, band, e[1], f[4], f[6], lean)
            end
            if t == false then
              t = process_entry(c, ms, worker, policy, stream, queue, band, e[1], f)
              if t then claimed[#claimed + 1] = t end
            end
          end
          local m = (#lean - head - 4) / 5
          if m > 0 then
            lean[head + 4] = m
          else -- no group for this stream
            for i = head + 4, head + 1, -1 do lean[i] = nil end
          end
          m = (#full - fhead - 3) / 7
          if m > 0 then
            full[fhead + 3] = m
          else
            for i = fhead + 3, fhead + 1, -1 do full[i] = nil end
          end
        end
      end
    end
  end
  local block = {}
  if read == 0 and not created then
    for qi = 1, nq do
      if redis.call('EXISTS', fetch_paused_key(keys, qi)) == 0 then
        local len = 0
        for band = TOP_BAND, 0, -1 do
          local stream = fetch_stream_key(keys, qi, band)
          local last = redis.pcall('XREVRANGE', stream, '+', '-', 'COUNT', 1)
          if not last.err then -- a key of another type is not blocked on
            block[#block + 1] = stream
            block[#block + 1] = (last[1] and last[1][1]) or '0-0'
            if last[1] then len = len + redis.call('XLEN', stream) end
          end
        end
        -- Nothing undelivered: the queue's counter is its streams' length (qlen_key).
        local q = args[3 + qi]
        if is_name(q) and tonumber((redis.pcall('GET', qlen_key(q)))) ~= len then
          redis.call('SET', qlen_key(q), fmt(len))
        end
      end
    end
  end
  if created then read = -1 end -- tells the daemon to fetch again at once
  return {claimed, block, read, lean, full}
end

reg('fetch', fetch)

