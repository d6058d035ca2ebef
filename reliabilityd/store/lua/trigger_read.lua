-- A series' inputs to its rate rules in one atomic step, so the counts belong to
-- the version. KEYS: meta, tasks, totals, then each rule's state hash. ARGV:
-- 1 when the series has a window (its lifetime counts are in totals), else 0.
-- Returns {version, tasks (HGETALL), totals (HGETALL, or {} without a window),
-- then {seq, doc} per rule}. A key of another type than a hash (damage) reads
-- as empty, so one series' damage never fails the others' reads in the same
-- round trip; the next state write replaces it (trigger_cas).
local function hash(key)
  return redis.call('TYPE', key)['ok'] == 'hash'
end
local version = hash(KEYS[1]) and redis.call('HGET', KEYS[1], 'version') or false
local tasks = hash(KEYS[2]) and redis.call('HGETALL', KEYS[2]) or {}
local totals = (ARGV[1] == '1' and hash(KEYS[3])) and redis.call('HGETALL', KEYS[3]) or {}
local out = {version, tasks, totals}
for i = 4, #KEYS do
  out[#out + 1] = hash(KEYS[i]) and redis.call('HMGET', KEYS[i], 'seq', 'doc') or {false, false}
end
return out
