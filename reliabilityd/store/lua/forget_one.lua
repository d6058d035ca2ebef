-- One task out of the counts, histogram, lottery index and idle index. Its
-- dedup records stay (they are keyed by digest, and expire by themselves): an
-- old trial of the task re-sent later is still a duplicate, a new one starts
-- the task afresh. Its recent trials go too (KEYS[6], the recent hash, and
-- its entries of KEYS[7], the failures list, by drop_failures once per call).
local forgotten = {}
local function forget(task)
  local cur = redis.call('HGET', KEYS[2], task)
  redis.call('ZREM', KEYS[5], task)
  redis.call('HDEL', KEYS[6], task)
  forgotten[task] = true
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
local function drop_failures()
  local kept, dropped = {}, false
  for _, e in ipairs(redis.call('LRANGE', KEYS[7], 0, -1)) do
    local task = string.match(e, '^([^\31]*)\31')
    if task and forgotten[task] then dropped = true else kept[#kept + 1] = e end
  end
  if dropped then
    redis.call('DEL', KEYS[7])
    if #kept > 0 then redis.call('RPUSH', KEYS[7], unpack(kept)) end
  end
end
