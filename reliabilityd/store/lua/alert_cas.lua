-- Alert transition by compare-and-set. KEYS: the rule's state hash, then one
-- outbox list per sink. ARGV: expected seq, the snapshot version the verdict
-- was taken on, new state document, notification ("" for none). Refused when
-- the state moved on (seq) or when the verdict rests on an older snapshot than
-- the one behind the stored state: a replica that judged by an old snapshot
-- must not undo a newer decision. The state and the notification's place in
-- every sink's outbox are written together or not at all, so a crash between
-- deciding and sending loses nothing, and two daemons never both decide.
local cur = redis.call('HMGET', KEYS[1], 'seq', 'snap')
local seq = tonumber(cur[1] or '0')
if seq ~= tonumber(ARGV[1]) then return 0 end
if tonumber(ARGV[2]) < tonumber(cur[2] or '-1') then return -1 end
redis.call('HSET', KEYS[1], 'seq', seq + 1, 'snap', ARGV[2], 'doc', ARGV[3])
if ARGV[4] ~= '' then
  for i = 2, #KEYS do redis.call('RPUSH', KEYS[i], ARGV[4]) end
end
return 1
