-- Take change marks. KEYS: changed set, claims zset (one hash tag). ARGV:
-- claim lifetime (ms), how many. Claims whose replica died (deadline passed)
-- go back to the set first, then up to ARGV[2] marks move into the claims with
-- a deadline; the caller drops its claim once the snapshot is written. A mark
-- added meanwhile (new data) stays in the set for the next claim.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local expired = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now)
for _, s in ipairs(expired) do
  redis.call('SADD', KEYS[1], s)
  redis.call('ZREM', KEYS[2], s)
end
local got = redis.call('SPOP', KEYS[1], tonumber(ARGV[2]))
for _, s in ipairs(got) do redis.call('ZADD', KEYS[2], now + tonumber(ARGV[1]), s) end
return got
