-- Release a suite's place: out of the suite set and out of its pool's count.
-- KEYS: the suite set, the suite -> pool hash, the pool -> size hash (one
-- hash tag). ARGV: the suite. Atomic with the admit script, so a reset frees
-- exactly one place in the pool the suite was admitted into.
redis.call('SREM', KEYS[1], ARGV[1])
local pool = redis.call('HGET', KEYS[2], ARGV[1])
if pool then
  redis.call('HDEL', KEYS[2], ARGV[1])
  if tonumber(redis.call('HINCRBY', KEYS[3], pool, -1)) <= 0 then
    redis.call('HDEL', KEYS[3], pool)
  end
end
return 1
