-- Write series' summary rows unless a newer one is there, and index the wholes by name.
-- KEYS: the rows hash, the row versions hash, the names zset (one hash tag).
-- ARGV: per row (member, snapshot version, row bytes, "1" for a suite as a whole).
-- Returns how many rows were written.
local wrote = 0
for i = 1, #ARGV, 4 do
  local member, v = ARGV[i], tonumber(ARGV[i + 1])
  if v >= tonumber(redis.call('HGET', KEYS[2], member) or '-1') then
    redis.call('HSET', KEYS[1], member, ARGV[i + 2])
    redis.call('HSET', KEYS[2], member, v)
    wrote = wrote + 1
  end
  if ARGV[i + 3] == '1' then redis.call('ZADD', KEYS[3], 0, member) end
end
return wrote
