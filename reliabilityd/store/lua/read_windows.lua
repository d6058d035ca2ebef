-- The same, plus every task's stored value (`n:c:<window outcomes>`), for the
-- change detector: O(tasks), read only for suites a detector rule watches.
return {
  redis.call('HGETALL', KEYS[1]),
  table.concat(redis.call('HGETALL', KEYS[2]), ' '),
  redis.call('HVALS', KEYS[3]),
}
