-- The reconcile's marks. KEYS: changed set, claims zset, released zset (one
-- hash tag). ARGV: since (ms, the Redis time before the caller read the
-- versions; -1 to only ask the time), then the marks found stale. A mark is
-- added unless its series is claimed now (a live claim: a replica is
-- computing it) or its claim was released at or after `since` (its snapshot
-- was written after the versions were read, so the staleness seen is old).
-- Returns {now (ms), {marks added...}}.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local since = tonumber(ARGV[1])
local added = {}
if since >= 0 then
  for i = 2, #ARGV do
    local s = ARGV[i]
    local deadline = tonumber(redis.call('ZSCORE', KEYS[2], s) or '-1')
    local released = tonumber(redis.call('ZSCORE', KEYS[3], s) or '-1')
    if deadline <= now and released < since then
      redis.call('SADD', KEYS[1], s)
      added[#added + 1] = s
    end
  end
end
return {now, added}
