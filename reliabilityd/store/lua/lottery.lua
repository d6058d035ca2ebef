-- The names of the tasks in each of some cells of one series' lottery zset, in one call.
-- KEYS[1]: the series' lottery zset; its members are "<n>:<c>:<task>", n and c zero-padded,
--          all at score 0, so each cell's tasks are one lexicographic range.
-- ARGV[1]: at most this many names per cell.
-- ARGV[2..]: each cell's prefix "<n>:<c>:".
-- Returns one array of members per cell, in ARGV's order.
local limit = tonumber(ARGV[1])
local out = {}
for i = 2, #ARGV do
  local prefix = ARGV[i]
  -- ';' sorts right after ':', so "(<n>:<c>;" bounds the cell's range.
  out[i - 1] = redis.call('ZRANGE', KEYS[1], '[' .. prefix, '(' .. string.sub(prefix, 1, -2) .. ';',
    'BYLEX', 'LIMIT', 0, limit)
end
return out
