-- reliabilityd's APPLY script before the dedup buckets (438e600), verbatim:
-- one `seen:<digest>` key per trial. The rolling-upgrade tests run it as the
-- earlier version would. KEYS: meta, tasks, hist, lottery, one seen key per
-- event. ARGV: ttl, window, now, then (task, outcome code) per event.
local meta, tasks, hist, lot = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local ttl, window, now = ARGV[1], tonumber(ARGV[2]), ARGV[3]
local counted, errors, skips, dups, passes = 0, 0, 0, 0, 0
local names, outs, hits = {}, {}, {}
for i = 1, #KEYS - 4 do
local o = ARGV[3 + 2 * i]
if not redis.call('SET', KEYS[4 + i], '1', 'NX', 'EX', ttl) then
dups = dups + 1
elseif o == 'e' then
errors = errors + 1
elseif o == 's' then
skips = skips + 1
else
local task = ARGV[2 + 2 * i]
local t = outs[task]
if t == nil then
t = {}
outs[task], hits[task] = t, 0
names[#names + 1] = task
end
if o == 'p' then
t[#t + 1] = '1'
hits[task] = hits[task] + 1
else
t[#t + 1] = '0'
end
end
end
if #names > 0 then
local function sliced(cmd, key, list)
for i = 1, #list, 1000 do
redis.call(cmd, key, unpack(list, i, math.min(i + 999, #list)))
end
end
local text, padded = {}, {}
local function str(x)
local s = text[x]
if s == nil then s = tostring(x); text[x] = s end
return s
end
local function member(n, c, task)
if c <= 0 or c >= n then return nil end
local pn, pc = padded[n], padded[c]
if pn == nil then pn = string.format('%010d', n); padded[n] = pn end
if pc == nil then pc = string.format('%010d', c); padded[c] = pc end
return pn .. ':' .. pc .. ':' .. task
end
local stored = {}
for i = 1, #names, 1000 do
local got = redis.call('HMGET', tasks, unpack(names, i, math.min(i + 999, #names)))
for j = 1, #got do stored[i + j - 1] = got[j] end
end
local moves, cells = {}, {}
local function move(cell, d)
if moves[cell] == nil then moves[cell] = 0; cells[#cells + 1] = cell end
moves[cell] = moves[cell] + d
end
local set, rem, add = {}, {}, {}
for i, task in ipairs(names) do
local cur, t, hit = stored[i], outs[task], hits[task]
local n, c, bits = 0, 0, ''
if cur then
local sn, sc, sb = string.match(cur, '^(%d+):(%d+):?([01]*)$')
n, c, bits = tonumber(sn), tonumber(sc), sb
end
local nn, nc
if window > 0 then
if #bits ~= n then bits = '' end
bits = bits .. table.concat(t)
if #bits > window then bits = string.sub(bits, #bits - window + 1) end
local _, ones = string.gsub(bits, '1', '')
nn, nc = #bits, ones
else
nn, nc = n + #t, c + hit
end
local cell = str(nn) .. ':' .. str(nc)
local value = (window > 0) and (cell .. ':' .. bits) or cell
if n > 0 then move(str(n) .. ':' .. str(c), -1) end
move(cell, 1)
if value ~= cur then
set[#set + 1] = task
set[#set + 1] = value
end
local was, now_in = member(n, c, task), member(nn, nc, task)
if was ~= now_in then
if was then rem[#rem + 1] = was end
if now_in then
add[#add + 1] = '0'
add[#add + 1] = now_in
end
end
counted = counted + #t
passes = passes + hit
end
sliced('HSET', tasks, set)
sliced('ZREM', lot, rem)
sliced('ZADD', lot, add)
for _, cell in ipairs(cells) do
local d = moves[cell]
if d ~= 0 and redis.call('HINCRBY', hist, cell, d) <= 0 then redis.call('HDEL', hist, cell) end
end
end
local version
if counted + errors + skips + dups > 0 then
if counted > 0 then
redis.call('HINCRBY', meta, 'trials', counted)
redis.call('HSET', meta, 'last_trial_at', now)
end
if errors > 0 then redis.call('HINCRBY', meta, 'errors', errors) end
if skips > 0 then redis.call('HINCRBY', meta, 'skips', skips) end
if dups > 0 then redis.call('HINCRBY', meta, 'duplicates', dups) end
version = redis.call('HINCRBY', meta, 'version', 1)
else
version = tonumber(redis.call('HGET', meta, 'version') or '0')
end
return {counted, errors, skips, dups, version, passes}
