-- A rate trigger's state by compare-and-set. KEYS: the state hash. ARGV: the
-- seq the state was read at, the new document, its life in milliseconds.
-- Refused (0) when another writer moved it on since, so a replica never
-- feeds one tick twice; the life is renewed with every write, so the state
-- of a rule no longer configured goes by itself.
-- A damaged seq (not an integer of at most 15 digits) reads as -1, as the
-- reader's (store/_triggers.py, seq_of), which then sends -1; a key of another
-- type than a hash reads as no state, which trigger_read does too.
local kind = redis.call('TYPE', KEYS[1])['ok']
if kind ~= 'hash' and kind ~= 'none' then redis.call('DEL', KEYS[1]) end
local raw = redis.call('HGET', KEYS[1], 'seq')
local seq = 0
if raw then
  local digits = string.match(raw, '^%-?(%d+)$')
  seq = (digits and #digits <= 15) and tonumber(raw) or -1
end
if seq ~= tonumber(ARGV[1]) then return 0 end
redis.call('HSET', KEYS[1], 'seq', math.max(seq, 0) + 1, 'doc', ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return 1
