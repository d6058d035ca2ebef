-- Take one task out of a suite's counts. KEYS: meta, tasks, hist, lottery,
-- touched. ARGV: task. Returns 1 when the task was there.
if forget(ARGV[1]) == 0 then return 0 end
redis.call('HINCRBY', KEYS[1], 'version', 1)
return 1
