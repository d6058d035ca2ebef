-- Move the trial log's oldest entries into the recent hash and the failures
-- list. KEYS: trial log, recent, failures. ARGV: entries folded (n), the
-- version of the oldest and of the newest of them, the most failures kept,
-- number of recent fields (pairs, P), the P field/value pairs, then the
-- failures to push, oldest first. Folds nothing (returns 0) unless the log's
-- last n entries are still those: another writer folded or trimmed first.
local n = tonumber(ARGV[1])
local function starts(i, v)
  local e = redis.call('LINDEX', KEYS[1], i)
  return e and string.sub(e, 1, #v + 1) == v .. '\29'
end
if redis.call('LLEN', KEYS[1]) < n or not starts(-1, ARGV[2]) or not starts(-n, ARGV[3]) then
  return 0
end
local p = tonumber(ARGV[5])
for i = 6, 5 + 2 * p, 1000 do
  redis.call('HSET', KEYS[2], unpack(ARGV, i, math.min(i + 999, 5 + 2 * p)))
end
if #ARGV > 5 + 2 * p then
  for i = 6 + 2 * p, #ARGV, 1000 do
    redis.call('LPUSH', KEYS[3], unpack(ARGV, i, math.min(i + 999, #ARGV)))
  end
  redis.call('LTRIM', KEYS[3], 0, tonumber(ARGV[4]) - 1)
end
redis.call('LTRIM', KEYS[1], 0, -n - 1)
return 1
