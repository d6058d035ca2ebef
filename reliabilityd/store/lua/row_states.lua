-- Set suites' row states, moving each between the state indexes, and index it by name.
-- KEYS: the states hash, the names zset, then one zset per state (one hash tag).
-- ARGV: per suite (name, state index: 1 for KEYS[3], 2 for KEYS[4], ...).
-- A suite with no snapshot yet is indexed here, so the index lists it without a row.
for i = 1, #ARGV, 2 do
  local suite, new = ARGV[i], tonumber(ARGV[i + 1])
  local old = tonumber(redis.call('HGET', KEYS[1], suite) or '0')
  if old ~= new then
    if old > 0 then redis.call('ZREM', KEYS[2 + old], suite) end
    redis.call('HSET', KEYS[1], suite, new)
  end
  redis.call('ZADD', KEYS[2 + new], 0, suite)
  redis.call('ZADD', KEYS[2], 0, suite)
end
return 1
