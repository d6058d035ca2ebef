-- Move the trial log's oldest entries into the recent hash, the failures
-- list and the per-run counts. KEYS: trial log, recent, failures, runs (zset
-- run -> last trial), run (hash run -> "first last trials passes"), then the
-- R runs' count hashes (task -> "n:c") updated, then the X runs' retired.
-- ARGV: entries folded (n), the version of the oldest and of the newest of
-- them, the most failures kept, number of recent fields (P), number of
-- failures (F), the P field/value pairs, the F failures to push (oldest
-- first), R, X, then per updated run: first, last, trials and passes to
-- add, and its tasks' new counts as one string ("<task>\31<n>:<c>" joined by
-- "\30"; computed by the caller from what it read: the log's tail check
-- makes the read and this write one step). A run's id is its hash's key past the
-- run hash's name and a colon. Folds nothing (returns 0) unless the log's
-- last n entries are still those: another writer folded or trimmed first.
local n = tonumber(ARGV[1])
local function starts(i, v)
  local e = redis.call('LINDEX', KEYS[1], i)
  return e and string.sub(e, 1, #v + 1) == v .. '\29'
end
if redis.call('LLEN', KEYS[1]) < n or not starts(-1, ARGV[2]) or not starts(-n, ARGV[3]) then
  return 0
end
local p, f = tonumber(ARGV[5]), tonumber(ARGV[6])
for i = 7, 6 + 2 * p, 1000 do
  redis.call('HSET', KEYS[2], unpack(ARGV, i, math.min(i + 999, 6 + 2 * p)))
end
if f > 0 then
  local a = 7 + 2 * p
  for i = a, a + f - 1, 1000 do
    redis.call('LPUSH', KEYS[3], unpack(ARGV, i, math.min(i + 999, a + f - 1)))
  end
  redis.call('LTRIM', KEYS[3], 0, tonumber(ARGV[4]) - 1)
end
local at = 7 + 2 * p + f
local r, x = tonumber(ARGV[at]), tonumber(ARGV[at + 1])
at = at + 2
local skip = #KEYS[5] + 2
for j = 1, r do
  local key = KEYS[5 + j]
  local id = string.sub(key, skip)
  local first, last = tonumber(ARGV[at]), tonumber(ARGV[at + 1])
  local trials, passes = tonumber(ARGV[at + 2]), tonumber(ARGV[at + 3])
  local meta = redis.call('HGET', KEYS[5], id)
  if meta then
    local f0, l0, t0, p0 = string.match(meta, '^(%d+) (%d+) (%d+) (%d+)$')
    if f0 then
      first, last = math.min(first, tonumber(f0)), math.max(last, tonumber(l0))
      trials, passes = trials + tonumber(t0), passes + tonumber(p0)
    end
  end
  redis.call('HSET', KEYS[5], id, string.format('%d %d %d %d', first, last, trials, passes))
  redis.call('ZADD', KEYS[4], last, id)
  local set = {}
  for task, nc in string.gmatch(ARGV[at + 4], '([^\30\31]+)\31(%d+:%d+)') do
    set[#set + 1] = task
    set[#set + 1] = nc
    if #set == 2000 then
      redis.call('HSET', key, unpack(set))
      set = {}
    end
  end
  if #set > 0 then redis.call('HSET', key, unpack(set)) end
  at = at + 5
end
for j = 1, x do
  local key = KEYS[5 + r + j]
  local id = string.sub(key, skip)
  redis.call('UNLINK', key)
  redis.call('HDEL', KEYS[5], id)
  redis.call('ZREM', KEYS[4], id)
end
redis.call('LTRIM', KEYS[1], 0, -n - 1)
return 1
