-- Admit suites into the suite set, up to a most. KEYS: the suite set. ARGV:
-- the most suites, then suite names. A known suite is always admitted; a new
-- one while the set holds fewer than the most. Atomic, so replicas racing
-- for the last places never admit more than the most. Returns the refused.
local most = tonumber(ARGV[1])
local size = redis.call('SCARD', KEYS[1])
local refused = {}
for i = 2, #ARGV do
  if redis.call('SISMEMBER', KEYS[1], ARGV[i]) == 0 then
    if size < most then
      redis.call('SADD', KEYS[1], ARGV[i])
      size = size + 1
    else
      refused[#refused + 1] = ARGV[i]
    end
  end
end
return refused
