-- Admit suites into the suite set, each within its pool's quota and all
-- within the deployment's most. KEYS: the suite set, the suite -> pool hash,
-- the pool -> size hash (one hash tag). ARGV: the deployment's most, then per
-- suite its name, its pool ("" = shared) and the pool's most. A known suite is
-- always admitted (one known but never pooled, such as one a racing apply
-- re-added after a reset, is entered in its pool now); a new one while both
-- its pool and the set have room. Atomic, so replicas racing for the last
-- places never admit more than either most. Returns the refused, each
-- followed by "pool" or "deployment": the cap it met.
local most = tonumber(ARGV[1])
local size = redis.call('SCARD', KEYS[1])
local refused = {}
for i = 2, #ARGV, 3 do
  local suite, pool, pool_most = ARGV[i], ARGV[i + 1], tonumber(ARGV[i + 2])
  if redis.call('SISMEMBER', KEYS[1], suite) == 1 then
    if redis.call('HSETNX', KEYS[2], suite, pool) == 1 then
      redis.call('HINCRBY', KEYS[3], pool, 1)
    end
  else
    local held = tonumber(redis.call('HGET', KEYS[3], pool) or '0')
    if held >= pool_most then
      refused[#refused + 1] = suite
      refused[#refused + 1] = 'pool'
    elseif size >= most then
      refused[#refused + 1] = suite
      refused[#refused + 1] = 'deployment'
    else
      redis.call('SADD', KEYS[1], suite)
      redis.call('HSET', KEYS[2], suite, pool)
      redis.call('HINCRBY', KEYS[3], pool, 1)
      size = size + 1
    end
  end
end
return refused
