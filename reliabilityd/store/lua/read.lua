-- Read meta and histogram in one atomic step, so the histogram belongs to the version.
-- The histogram comes back as one string, `n:c count n:c count ...`: the client
-- parses it with one split instead of building an object for every field and count.
return {redis.call('HGETALL', KEYS[1]), table.concat(redis.call('HGETALL', KEYS[2]), ' ')}
