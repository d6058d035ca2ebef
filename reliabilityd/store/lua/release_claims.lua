-- Drop claims whose snapshots are written. KEYS: claims zset, released zset
-- (the change marks' hash tag). ARGV: the marks. Each release is remembered
-- with its time (ms) for the reconcile (mark_unclaimed.lua), which must not
-- re-mark a series whose snapshot was written after it read the versions.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
for _, s in ipairs(ARGV) do
  redis.call('ZREM', KEYS[1], s)
  redis.call('ZADD', KEYS[2], now, s)
end
return now
