-- Write a snapshot unless a newer one is there. KEYS: snapshot. ARGV: version,
-- number of CI field pairs, CI pairs..., value pairs... The CI part (json, CI
-- bounds, version) is written when version >= the stored `version`; the value
-- part (point estimates, counters) when version >= `live_version`, so two
-- daemons never overwrite new numbers with old ones.
local v = tonumber(ARGV[1])
local nci = tonumber(ARGV[2])
local wrote = 0
if nci > 0 and v >= tonumber(redis.call('HGET', KEYS[1], 'version') or '-1') then
  local args = {}
  for i = 3, 2 + 2 * nci do args[#args + 1] = ARGV[i] end
  redis.call('HSET', KEYS[1], 'version', v, unpack(args))
  wrote = 1
end
if #ARGV > 2 + 2 * nci and v >= tonumber(redis.call('HGET', KEYS[1], 'live_version') or '-1') then
  local args = {}
  for i = 3 + 2 * nci, #ARGV do args[#args + 1] = ARGV[i] end
  redis.call('HSET', KEYS[1], 'live_version', v, unpack(args))
  wrote = wrote + 2
end
return wrote
