-- Take out the tasks without an event since ARGV[1] (Unix seconds), at most
-- ARGV[2] of them. KEYS: as FORGET. Returns how many left the counts.
local idle = redis.call('ZRANGEBYSCORE', KEYS[5], '-inf', '(' .. ARGV[1], 'LIMIT', 0, ARGV[2])
local gone = 0
for _, task in ipairs(idle) do gone = gone + forget(task) end
if #idle > 0 then drop_failures() end
if gone > 0 then redis.call('HINCRBY', KEYS[1], 'version', 1) end
return gone
