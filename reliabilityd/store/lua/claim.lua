-- Take change marks. KEYS: changed set, claims zset, released zset (one hash
-- tag). ARGV: claim lifetime (ms), how many, how long a release is remembered
-- (ms), then optionally the marks to take. Claims whose replica died
-- (deadline passed) go back to the set first; then up to ARGV[2] marks are
-- taken at random or, when marks are named, those of them still marked. A
-- mark whose series another replica is computing right now (a live claim: new
-- data came meanwhile) stays in the set until that claim is released, so no
-- two replicas compute a series at once; the rest move into the claims with a
-- deadline. The caller releases its claims once the snapshots are written
-- (release_claims.lua). Returns {marks held back, {marks taken...}}.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local expired = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now)
for _, s in ipairs(expired) do
  redis.call('SADD', KEYS[1], s)
  redis.call('ZREM', KEYS[2], s)
end
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now - tonumber(ARGV[3]))
local popped = {}
if #ARGV > 3 then
  for i = 4, #ARGV do
    if redis.call('SREM', KEYS[1], ARGV[i]) == 1 then popped[#popped + 1] = ARGV[i] end
  end
else
  popped = redis.call('SPOP', KEYS[1], tonumber(ARGV[2]))
end
local got, held = {}, {}
for _, s in ipairs(popped) do
  if redis.call('ZSCORE', KEYS[2], s) then
    held[#held + 1] = s
  else
    got[#got + 1] = s
    redis.call('ZADD', KEYS[2], now + tonumber(ARGV[1]), s)
    redis.call('ZREM', KEYS[3], s)
  end
end
if #held > 0 then redis.call('SADD', KEYS[1], unpack(held)) end
return {#held, got}
