-- Take one task out of a suite's counts. KEYS: meta, tasks, hist, lottery,
-- touched, recent, failures, runs, run, totals, then each run's count hash. ARGV: task. Returns 1 when the task was there.
local there = forget(ARGV[1])
drop_failures()
if there == 0 then return 0 end
redis.call('HINCRBY', KEYS[1], 'version', 1)
return 1
