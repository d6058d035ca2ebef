-- Apply one suite's batch atomically, to the suite as a whole and to each
-- event's slice. KEYS: meta, tasks, hist, lottery, the slice registry, the
-- labels-seen set, the trial log, totals, then per slice named (meta, tasks,
-- hist, lottery, totals), then the dedup bucket keys to look in (oldest
-- first). ARGV:
-- window, now, number of bucket keys, the position among them of the bucket
-- to write, that bucket's lifetime in seconds, number of slices named (S),
-- the most slices the suite may have, number of label keys (L), whether the
-- suite keeps its recent trials (1 or 0), the most entries of its trial log,
-- the chunk's trial records (one string), the S slice ids, the L label keys
-- seen, then each event's digest (16 bytes), then (task, outcome code, slice
-- position 1..S or 0 for none) per event. Returns {counted, errors, skips,
-- duplicates, version, passes, overflow, log length} of the whole.
--
-- Trial records (store/_recent.py) are built by the caller, every pass and
-- fail of the chunk in one string, and pushed whole onto the head of the
-- trial log with the version this call made and the positions of the
-- chunk's duplicates ("<version>\29<positions>\29<records>"): one LPUSH
-- and LTRIM per chunk, whatever its size, so a record costs the script no
-- work of its own. A duplicate's record is named, never counted by a reader.
-- The caller folds the log into each task's last trials (recent.fold) once
-- it is long.
--
-- Dedup records (dedup.py) belong to the suite: a trial's digest goes into
-- the set of its bucket of the clock; a digest in any bucket looked in is a
-- duplicate, in the whole and in its slice alike. One SMISMEMBER per
-- existing bucket and one SADD per chunk.
--
-- A slice not yet in the registry is created while the registry holds fewer
-- than the most slices allowed; past that its events count in the whole only
-- and in the whole's `slice_overflow`, never in another slice.
--
-- With a window, a task's value holds only its window's counts; its lifetime
-- counts (`n:c`, what the rate trigger differences from tick to tick) go in
-- the series' totals hash, one HMGET and one HSET per chunk. Without one the
-- task's value is its lifetime counts and the totals hash is not written.
--
-- Every redis.call has a fixed cost, so nothing else is written per event;
-- the counted events are grouped by task and each distinct task is read
-- (one HMGET), brought to its final value in Lua (its events in order) and
-- written (one HSET, one ZREM, one ZADD) once per chunk and series, from its
-- original to its final value. Histogram moves are summed per cell.
-- Variadic calls go in slices, as Lua's unpack stops at about 8,000 values.
local registry, seen = KEYS[5], KEYS[6]
local window, now = tonumber(ARGV[1]), ARGV[2]
local nb, wb, life = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local ns, most, nl = tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8])
local keep, cap, records = ARGV[9] == '1', tonumber(ARGV[10]), ARGV[11]
local head = 11 + ns + nl
local total = (#ARGV - head) / 4
local dk = 8 + 5 * ns
-- Arguments are checked (_APPLY_CHECK, in front) and the reads that decide
-- what is written done before the first write: Redis lets a script that has
-- written go on, so a call that fails fails whole.
local known = {}
for b = 1, nb do
  local key = KEYS[dk + b]
  if redis.call('EXISTS', key) == 1 then
    for i = 1, total, 1000 do
      local got = redis.call('SMISMEMBER', key, unpack(ARGV, head + i, head + math.min(i + 999, total)))
      for j = 1, #got do
        if got[j] == 1 then known[i + j - 1] = true end
      end
    end
  end
end
-- Per series (the whole, each slice): each counted task in order of first
-- appearance, its outcomes in this chunk, oldest first ('1' = pass), how
-- many passed; the counters.
local function series()
  return {names = {}, outs = {}, hits = {}, errors = 0, skips = 0, dups = 0, fresh = 0}
end
local function add(s, task, o)
  s.fresh = s.fresh + 1
  if o == 'e' then
    s.errors = s.errors + 1
  elseif o == 's' then
    s.skips = s.skips + 1
  else
    local t = s.outs[task]
    if t == nil then
      t = {}
      s.outs[task], s.hits[task] = t, 0
      s.names[#s.names + 1] = task
    end
    if o == 'p' then
      t[#t + 1] = '1'
      s.hits[task] = s.hits[task] + 1
    else
      t[#t + 1] = '0'
    end
  end
end
local whole, parts = series(), {}
local fresh, here, dupes = {}, {}, {}
for i = 1, total do
  local d, at = ARGV[head + i], head + total + 3 * (i - 1)
  local task, o, sj = ARGV[at + 1], ARGV[at + 2], tonumber(ARGV[at + 3])
  local part = nil
  if sj > 0 then
    part = parts[sj]
    if part == nil then part = series(); parts[sj] = part end
  end
  if known[i] or here[d] then
    dupes[#dupes + 1] = origin and origin[i] or i
    whole.dups = whole.dups + 1
    if part then part.dups = part.dups + 1 end
  else
    here[d] = true
    fresh[#fresh + 1] = d
    add(whole, task, o)
    if part then add(part, task, o) end
  end
end
-- Which slices count: those registered, then new ones while there is room.
local overflow, created = 0, {}
if ns > 0 then
  local got = redis.call('HMGET', registry, unpack(ARGV, 12, 11 + ns))
  local size = redis.call('HLEN', registry)
  for j = 1, ns do
    local part = parts[j]
    if part and not got[j] then
      if part.fresh > 0 and size < most then
        size = size + 1
        created[#created + 1] = ARGV[11 + j]
        created[#created + 1] = now
      else
        overflow = overflow + part.fresh
        parts[j] = nil
      end
    end
  end
end
if #fresh > 0 then
  local bucket = KEYS[dk + wb]
  for i = 1, #fresh, 1000 do
    redis.call('SADD', bucket, unpack(fresh, i, math.min(i + 999, #fresh)))
  end
  -- A bucket's life only grows: a writer with a longer dedup ttl keeps it.
  -- `life` has a second to spare, so a bucket within it of its life is
  -- left alone (no EXPIRE, and no line in the append-only file, per chunk).
  if redis.call('PTTL', bucket) < (life - 1) * 1000 then redis.call('EXPIRE', bucket, life) end
end
if #created > 0 then redis.call('HSET', registry, unpack(created)) end
if nl > 0 then
  -- At most 32 label keys per suite (keys.LABELS_KEPT).
  local room = 32 - redis.call('SCARD', seen)
  if room > 0 then
    local have = redis.call('SMISMEMBER', seen, unpack(ARGV, 12 + ns, 11 + ns + nl))
    local new = {}
    for j = 1, nl do
      if have[j] == 0 and #new < room then new[#new + 1] = ARGV[11 + ns + j] end
    end
    if #new > 0 then redis.call('SADD', seen, unpack(new)) end
  end
end
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
-- One series' tasks, histogram and lottery index brought to their new values;
-- returns (counted, passes).
local function hmget(key, names)
  local out = {}
  for i = 1, #names, 1000 do
    local got = redis.call('HMGET', key, unpack(names, i, math.min(i + 999, #names)))
    for j = 1, #got do out[i + j - 1] = got[j] end
  end
  return out
end
local function count(s, tasks, hist, lot, totals)
  local names = s.names
  if #names == 0 then return 0, 0 end
  local stored = hmget(tasks, names)
  local lifetime = {}
  if window > 0 then
    local had = hmget(totals, names)
    for i, task in ipairs(names) do
      local sn, sc = string.match(had[i] or '', '^(%d+):(%d+)$')
      lifetime[#lifetime + 1] = task
      lifetime[#lifetime + 1] = str((tonumber(sn) or 0) + #s.outs[task]) .. ':'
        .. str((tonumber(sc) or 0) + s.hits[task])
    end
  end
  local moves, cells = {}, {}
  local function move(cell, d)
    if moves[cell] == nil then moves[cell] = 0; cells[#cells + 1] = cell end
    moves[cell] = moves[cell] + d
  end
  local set, rem, addl = {}, {}, {}
  local counted, passes = 0, 0
  for i, task in ipairs(names) do
    local cur, t, hit = stored[i], s.outs[task], s.hits[task]
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
        addl[#addl + 1] = '0'
        addl[#addl + 1] = now_in
      end
    end
    counted = counted + #t
    passes = passes + hit
  end
  sliced('HSET', tasks, set)
  sliced('HSET', totals, lifetime)
  sliced('ZREM', lot, rem)
  sliced('ZADD', lot, addl)
  for _, cell in ipairs(cells) do
    local d = moves[cell]
    if d ~= 0 and redis.call('HINCRBY', hist, cell, d) <= 0 then redis.call('HDEL', hist, cell) end
  end
  return counted, passes
end
-- The counters of one series; returns its version.
local function finish(s, meta, counted, extra)
  if counted + s.errors + s.skips + s.dups + extra > 0 then
    if counted > 0 then
      redis.call('HINCRBY', meta, 'trials', counted)
      redis.call('HSET', meta, 'last_trial_at', now)
    end
    if s.errors > 0 then redis.call('HINCRBY', meta, 'errors', s.errors) end
    if s.skips > 0 then redis.call('HINCRBY', meta, 'skips', s.skips) end
    if s.dups > 0 then redis.call('HINCRBY', meta, 'duplicates', s.dups) end
    if extra > 0 then redis.call('HINCRBY', meta, 'slice_overflow', extra) end
    return redis.call('HINCRBY', meta, 'version', 1)
  end
  return tonumber(redis.call('HGET', meta, 'version') or '0')
end
for j = 1, ns do
  local part = parts[j]
  if part then
    local base = 8 + 5 * (j - 1)
    local counted = count(part, KEYS[base + 2], KEYS[base + 3], KEYS[base + 4], KEYS[base + 5])
    finish(part, KEYS[base + 1], counted, 0)
  end
end
local counted, passes = count(whole, KEYS[2], KEYS[3], KEYS[4], KEYS[8])
local version = finish(whole, KEYS[1], counted, overflow)
local logged = 0
if keep then
  if records ~= '' and counted > 0 then
    for _, i in ipairs(gone) do dupes[#dupes + 1] = i end
    local head_of = version .. '\29' .. table.concat(dupes, ',') .. '\29'
    logged = redis.call('LPUSH', KEYS[7], head_of .. records)
    if logged > cap then
      redis.call('LTRIM', KEYS[7], 0, cap - 1)
      logged = cap
    end
  else
    logged = redis.call('LLEN', KEYS[7])
  end
end
return {counted, whole.errors, whole.skips, whole.dups, version, passes, overflow, logged}
