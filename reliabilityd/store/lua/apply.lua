-- Apply one suite's batch atomically. KEYS: meta, tasks, hist, lottery, then
-- the dedup bucket keys to look in (oldest first). ARGV: window, now, number
-- of bucket keys, the position among them of the bucket to write, that
-- bucket's lifetime in seconds, then each event's digest (16 bytes), then
-- (task, outcome code) per event. Returns {counted, errors, skips,
-- duplicates, version, passes}.
--
-- Dedup records (dedup.py): a trial's digest goes into the set of its bucket
-- of the clock; a digest in any bucket looked in is a duplicate. One
-- SMISMEMBER per existing bucket and one SADD per chunk.
--
-- Every redis.call has a fixed cost, so nothing else is written per event;
-- the counted events are grouped by task and each distinct task is read
-- (one HMGET), brought to its final value in Lua (its events in order) and
-- written (one HSET, one ZREM, one ZADD) once per chunk, from its original to
-- its final value. Histogram moves are summed per cell. Variadic calls go in
-- slices, as Lua's unpack stops at about 8,000 values.
local meta, tasks, hist, lot = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local window, now = tonumber(ARGV[1]), ARGV[2]
local nb, wb, life = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local total = (#ARGV - 5) / 3
-- Arguments are checked (_APPLY_CHECK, in front) and every read done before
-- the first write: Redis lets a script that has written go on, so a call
-- that fails fails whole.
local known = {}
for b = 1, nb do
  local key = KEYS[4 + b]
  if redis.call('EXISTS', key) == 1 then
    for i = 1, total, 1000 do
      local got = redis.call('SMISMEMBER', key, unpack(ARGV, 5 + i, 5 + math.min(i + 999, total)))
      for j = 1, #got do
        if got[j] == 1 then known[i + j - 1] = true end
      end
    end
  end
end
local counted, errors, skips, dups, passes = 0, 0, 0, 0, 0
-- Each counted task (in order of first appearance): its outcomes in this
-- chunk, oldest first ('1' = pass), and how many passed.
local names, outs, hits = {}, {}, {}
local fresh, here = {}, {}
for i = 1, total do
  local d, o = ARGV[5 + i], ARGV[5 + total + 2 * i]
  if known[i] or here[d] then
    dups = dups + 1
  else
    here[d] = true
    fresh[#fresh + 1] = d
    if o == 'e' then
      errors = errors + 1
    elseif o == 's' then
      skips = skips + 1
    else
      local task = ARGV[4 + total + 2 * i]
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
end
if #fresh > 0 then
  local bucket = KEYS[4 + wb]
  for i = 1, #fresh, 1000 do
    redis.call('SADD', bucket, unpack(fresh, i, math.min(i + 999, #fresh)))
  end
  -- A bucket's life only grows: a writer with a longer dedup ttl keeps it.
  -- `life` has a second to spare, so a bucket within it of its life is
  -- left alone (no EXPIRE, and no line in the append-only file, per chunk).
  if redis.call('PTTL', bucket) < (life - 1) * 1000 then redis.call('EXPIRE', bucket, life) end
end
if #names > 0 then
  local function sliced(cmd, key, list)
    for i = 1, #list, 1000 do
      redis.call(cmd, key, unpack(list, i, math.min(i + 999, #list)))
    end
  end
  -- Numbers as text, each converted once per call: Lua formats a number
  -- through printf, and a chunk's tasks share few distinct counts.
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
      -- A task counted before the window was set has no order to trim by:
      -- its window starts with this chunk's first trial of it.
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
