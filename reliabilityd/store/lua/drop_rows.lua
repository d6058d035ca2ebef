-- Take suites out of the rows and their indexes: their own rows and their slices'.
-- KEYS: the rows hash, the row versions hash, the states hash, the names zset, then
-- one zset per state (one hash tag). ARGV: the suites, then "", then the slices'
-- members (``<suite>/<slice id>``) to drop.
local slices = false
for i = 1, #ARGV do
  local member = ARGV[i]
  if member == '' then
    slices = true
  else
    redis.call('HDEL', KEYS[1], member)
    redis.call('HDEL', KEYS[2], member)
    if not slices then
      redis.call('HDEL', KEYS[3], member)
      redis.call('ZREM', KEYS[4], member)
      for k = 5, #KEYS do redis.call('ZREM', KEYS[k], member) end
    end
  end
end
return 1
