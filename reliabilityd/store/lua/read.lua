-- Read meta and histogram in one atomic step, so the histogram belongs to the version.
return {redis.call('HGETALL', KEYS[1]), redis.call('HGETALL', KEYS[2])}
