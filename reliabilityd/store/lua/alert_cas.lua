-- Alert transition by compare-and-set. KEYS: the rule's state hash, the
-- series' transition list, the suite's tasks hash, the rule's breach baseline
-- hash, then one outbox list per sink. ARGV: expected seq, the snapshot
-- version the verdict was taken on, new state document, notification (""
-- for none), transition record ("" for none), the most transitions kept, the
-- transition list's TTL (ms), the breach start time when this transition
-- starts a breach ("" otherwise). Refused when the state moved on (seq) or
-- when the verdict rests on an older snapshot than the one behind the stored
-- state: a replica that judged by an old snapshot must not undo a newer
-- decision. The state, the transition record, the baseline and the
-- notification's place in every sink's outbox are written together or not
-- at all, so a crash between deciding and sending loses nothing, and two
-- daemons never both decide (nor both record).
-- A transition that starts a breach copies every task's counts into the
-- baseline (one COPY inside the suite's slot), so a reader can tell which
-- tasks moved since the breach began.
local cur = redis.call('HMGET', KEYS[1], 'seq', 'snap')
local seq = tonumber(cur[1] or '0')
if seq ~= tonumber(ARGV[1]) then return 0 end
if tonumber(ARGV[2]) < tonumber(cur[2] or '-1') then return -1 end
redis.call('HSET', KEYS[1], 'seq', seq + 1, 'snap', ARGV[2], 'doc', ARGV[3])
if ARGV[5] ~= '' then
  redis.call('RPUSH', KEYS[2], ARGV[5])
  redis.call('LTRIM', KEYS[2], -tonumber(ARGV[6]), -1)
  redis.call('PEXPIRE', KEYS[2], ARGV[7])
end
if ARGV[8] ~= '' then
  if redis.call('EXISTS', KEYS[3]) == 1 then
    redis.call('COPY', KEYS[3], KEYS[4], 'REPLACE')
  else
    redis.call('DEL', KEYS[4])
  end
  redis.call('HSET', KEYS[1], 'baseline_at', ARGV[8])
end
if ARGV[4] ~= '' then
  for i = 5, #KEYS do redis.call('RPUSH', KEYS[i], ARGV[4]) end
end
return 1
