-- One task out of the counts, histogram, lottery index and idle index. Its
-- dedup records stay (they are keyed by digest, and expire by themselves): an
-- old trial of the task re-sent later is still a duplicate, a new one starts
-- the task afresh.
local function forget(task)
  local cur = redis.call('HGET', KEYS[2], task)
  redis.call('ZREM', KEYS[5], task)
  if not cur then return 0 end
  local sn, sc = string.match(cur, '^(%d+):(%d+)')
  local n, c = tonumber(sn), tonumber(sc)
  local cell = n .. ':' .. c
  if redis.call('HINCRBY', KEYS[3], cell, -1) <= 0 then redis.call('HDEL', KEYS[3], cell) end
  if c > 0 and c < n then
    redis.call('ZREM', KEYS[4], string.format('%010d:%010d:', n, c) .. task)
  end
  redis.call('HDEL', KEYS[2], task)
  return 1
end
