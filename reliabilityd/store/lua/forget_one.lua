-- One task out of the counts, histogram, lottery index and idle index. Its
-- dedup records stay (they are keyed by digest, and expire by themselves): an
-- old trial of the task re-sent later is still a duplicate, a new one starts
-- the task afresh. Its recent trials go too (KEYS[6], the recent hash, and
-- its entries of KEYS[7], the failures list, by drop_failures once per call),
-- its counts in every run (KEYS[8], the runs zset, KEYS[9], the run hash,
-- then from KEYS[11] on each run's count hash): a run left without trials
-- leaves; and its lifetime counts (KEYS[10], the totals hash).
local forgotten = {}
local skip = #KEYS[9] + 2
local function forget_runs(task)
  for i = 11, #KEYS do
    local got = redis.call('HGET', KEYS[i], task)
    if got then
      redis.call('HDEL', KEYS[i], task)
      local id = string.sub(KEYS[i], skip)
      local sn, sc = string.match(got, '^(%d+):(%d+)')
      local meta = redis.call('HGET', KEYS[9], id)
      local f0, l0, t0, p0 = string.match(meta or '', '^(%d+) (%d+) (%d+) (%d+)$')
      local trials = f0 and tonumber(t0) - tonumber(sn) or 0
      if trials <= 0 or redis.call('EXISTS', KEYS[i]) == 0 then
        redis.call('DEL', KEYS[i])
        redis.call('HDEL', KEYS[9], id)
        redis.call('ZREM', KEYS[8], id)
      else
        local passes = tonumber(p0) - tonumber(sc)
        redis.call('HSET', KEYS[9], id, string.format('%s %s %d %d', f0, l0, trials, passes))
      end
    end
  end
end
local function forget(task)
  local cur = redis.call('HGET', KEYS[2], task)
  redis.call('ZREM', KEYS[5], task)
  redis.call('HDEL', KEYS[6], task)
  redis.call('HDEL', KEYS[10], task)
  forget_runs(task)
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
