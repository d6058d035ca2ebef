"""The Lua scripts reliabilityd runs in Redis, beside the keys they take.

Every script receives every key it touches in KEYS, and all of them share one
hash tag, so each runs unchanged on Redis Cluster. Scripts are sent with EVAL
(Redis caches them by hash; redis-py refuses pipelined EVALSHA on a cluster),
so a SCRIPT FLUSH or a Redis restart never leaves a NOSCRIPT behind.
"""

from __future__ import annotations


def _lua(body: str) -> str:
    """The script without its comment lines and indentation.

    Redis hashes the whole body on every EVAL; for a chunk of one event that
    hash is about a tenth of the call's cost.
    """
    lines = (line.strip() for line in body.splitlines())
    return "\n".join(line for line in lines if line and not line.startswith("--")) + "\n"


# APPLY's arguments in shape, before anything is written (see APPLY).
_APPLY_CHECK = _lua(r"""
do
  local n, nb, wb, life = (#ARGV - 5) / 3, tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
  if n ~= math.floor(n) or not nb or not wb or wb < 1 or wb > nb or #KEYS ~= 4 + nb
    or not life or life < 1 or life > 4000000000 then
    return redis.error_reply('ERR reliabilityd apply: arguments out of shape')
  end
end
""")


# Apply one suite's batch atomically. KEYS: meta, tasks, hist, lottery, then
# the dedup bucket keys to look in (oldest first). ARGV: window, now, number
# of bucket keys, the position among them of the bucket to write, that
# bucket's lifetime in seconds, then each event's digest (16 bytes), then
# (task, outcome code) per event. Returns {counted, errors, skips,
# duplicates, version, passes}.
#
# Dedup records (dedup.py): a trial's digest goes into the set of its bucket
# of the clock; a digest in any bucket looked in is a duplicate. One
# SMISMEMBER per existing bucket and one SADD per chunk.
#
# Every redis.call has a fixed cost, so nothing else is written per event;
# the counted events are grouped by task and each distinct task is read
# (one HMGET), brought to its final value in Lua (its events in order) and
# written (one HSET, one ZREM, one ZADD) once per chunk, from its original to
# its final value. Histogram moves are summed per cell. Variadic calls go in
# slices, as Lua's unpack stops at about 8,000 values.
APPLY = _APPLY_CHECK + _lua(r"""
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
""")


# Read meta and histogram in one atomic step, so the histogram belongs to the version.
READ = r"""
return {redis.call('HGETALL', KEYS[1]), redis.call('HGETALL', KEYS[2])}
"""

# The same, plus every task's stored value (`n:c:<window outcomes>`), for the
# change detector: O(tasks), read only for suites a detector rule watches.
READ_WINDOWS = r"""
return {
  redis.call('HGETALL', KEYS[1]), redis.call('HGETALL', KEYS[2]), redis.call('HVALS', KEYS[3])
}
"""

# Write a snapshot unless a newer one is there. KEYS: snapshot. ARGV: version,
# number of CI field pairs, CI pairs..., value pairs... The CI part (json, CI
# bounds, version) is written when version >= the stored `version`; the value
# part (point estimates, counters) when version >= `live_version`, so two
# daemons never overwrite new numbers with old ones.
WRITE_SNAPSHOT = r"""
local v = tonumber(ARGV[1])
local nci = tonumber(ARGV[2])
local wrote = 0
if nci > 0 and v >= tonumber(redis.call('HGET', KEYS[1], 'version') or '-1') then
  local args = {}
  for i = 3, 2 + 2 * nci do args[#args + 1] = ARGV[i] end
  redis.call('HSET', KEYS[1], 'version', v, unpack(args))
  wrote = 1
end
if #ARGV > 2 + 2 * nci and v >= tonumber(redis.call('HGET', KEYS[1], 'live_version') or '-1') then
  local args = {}
  for i = 3 + 2 * nci, #ARGV do args[#args + 1] = ARGV[i] end
  redis.call('HSET', KEYS[1], 'live_version', v, unpack(args))
  wrote = wrote + 2
end
return wrote
"""


# Alert transition by compare-and-set. KEYS: the rule's state hash, then one
# outbox list per sink. ARGV: expected seq, the snapshot version the verdict
# was taken on, new state document, notification ("" for none). Refused when
# the state moved on (seq) or when the verdict rests on an older snapshot than
# the one behind the stored state: a replica that judged by an old snapshot
# must not undo a newer decision. The state and the notification's place in
# every sink's outbox are written together or not at all, so a crash between
# deciding and sending loses nothing, and two daemons never both decide.
ALERT_CAS = r"""
local cur = redis.call('HMGET', KEYS[1], 'seq', 'snap')
local seq = tonumber(cur[1] or '0')
if seq ~= tonumber(ARGV[1]) then return 0 end
if tonumber(ARGV[2]) < tonumber(cur[2] or '-1') then return -1 end
redis.call('HSET', KEYS[1], 'seq', seq + 1, 'snap', ARGV[2], 'doc', ARGV[3])
if ARGV[4] ~= '' then
  for i = 2, #KEYS do redis.call('RPUSH', KEYS[i], ARGV[4]) end
end
return 1
"""

# Drop the head of an outbox only if it is still the entry just delivered.
OUTBOX_POP = r"""
if redis.call('LINDEX', KEYS[1], 0) == ARGV[1] then
  redis.call('LPOP', KEYS[1])
  return 1
end
return 0
"""

# Extend (ARGV[2] > 0) or release (ARGV[2] = 0) a lease we hold.
LEASE = r"""
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
if tonumber(ARGV[2]) > 0 then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
else
  redis.call('DEL', KEYS[1])
end
return 1
"""


# Take change marks. KEYS: changed set, claims zset (one hash tag). ARGV:
# claim lifetime (ms), how many. Claims whose replica died (deadline passed)
# go back to the set first, then up to ARGV[2] marks move into the claims with
# a deadline; the caller drops its claim once the snapshot is written. A mark
# added meanwhile (new data) stays in the set for the next claim.
CLAIM = r"""
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local expired = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now)
for _, s in ipairs(expired) do
  redis.call('SADD', KEYS[1], s)
  redis.call('ZREM', KEYS[2], s)
end
local got = redis.call('SPOP', KEYS[1], tonumber(ARGV[2]))
for _, s in ipairs(got) do redis.call('ZADD', KEYS[2], now + tonumber(ARGV[1]), s) end
return got
"""

# Keep the largest committed stream entry id. KEYS: cursor. ARGV: entry id.
CURSOR_MAX = r"""
local function parse(id)
  local ms, seq = string.match(id or '', '^(%d+)-(%d+)$')
  return tonumber(ms or '-1'), tonumber(seq or '-1')
end
local ms, seq = parse(ARGV[1])
local cms, cseq = parse(redis.call('GET', KEYS[1]))
if ms > cms or (ms == cms and seq > cseq) then
  redis.call('SET', KEYS[1], ARGV[1])
  return 1
end
return 0
"""

# One task out of the counts, histogram, lottery index and idle index. Its
# dedup records stay (they are keyed by digest, and expire by themselves): an
# old trial of the task re-sent later is still a duplicate, a new one starts
# the task afresh.
_FORGET_ONE = r"""
local function forget(task)
  local cur = redis.call('HGET', KEYS[2], task)
  redis.call('ZREM', KEYS[5], task)
  if not cur then return 0 end
  local sn, sc = string.match(cur, '^(%d+):(%d+)')
  local n, c = tonumber(sn), tonumber(sc)
  local cell = n .. ':' .. c
  if redis.call('HINCRBY', KEYS[3], cell, -1) <= 0 then redis.call('HDEL', KEYS[3], cell) end
  if c > 0 and c < n then
    redis.call('ZREM', KEYS[4], string.format('%010d:%010d:', n, c) .. task)
  end
  redis.call('HDEL', KEYS[2], task)
  return 1
end
"""

# Take one task out of a suite's counts. KEYS: meta, tasks, hist, lottery,
# touched. ARGV: task. Returns 1 when the task was there.
FORGET = (
    _FORGET_ONE
    + r"""
if forget(ARGV[1]) == 0 then return 0 end
redis.call('HINCRBY', KEYS[1], 'version', 1)
return 1
"""
)

# Take out the tasks without an event since ARGV[1] (Unix seconds), at most
# ARGV[2] of them. KEYS: as FORGET. Returns how many left the counts.
EXPIRE_IDLE = (
    _FORGET_ONE
    + r"""
local idle = redis.call('ZRANGEBYSCORE', KEYS[5], '-inf', '(' .. ARGV[1], 'LIMIT', 0, ARGV[2])
local gone = 0
for _, task in ipairs(idle) do gone = gone + forget(task) end
if gone > 0 then redis.call('HINCRBY', KEYS[1], 'version', 1) end
return gone
"""
)


# Runs in front of APPLY's body. KEYS: as APPLY, then the suite's import
# ledger (a hash: the hex of each imported trial's digest -> 1) last. ARGV:
# as APPLY. Every event the ledger holds is dropped and the rest recorded;
# APPLY then counts what is left, in the same atomic call.
_IMPORT_GUARD = (
    _lua(r"""
local ledger = table.remove(KEYS)
""")
    + _APPLY_CHECK
    + _lua(r"""
local total = (#ARGV - 5) / 3
local hex = string.rep('%02x', 16)
local ds, ps = {}, {}
for i = 1, total do
  local d = ARGV[5 + i]
  if redis.call('HSETNX', ledger, string.format(hex, string.byte(d, 1, 16)), '1') == 1 then
    ds[#ds + 1] = d
    ps[#ps + 1] = ARGV[4 + total + 2 * i]
    ps[#ps + 1] = ARGV[5 + total + 2 * i]
  end
end
for i = 1, #ds do ARGV[5 + i] = ds[i] end
for i = 1, #ps do ARGV[5 + #ds + i] = ps[i] end
for i = #ARGV, 6 + 3 * #ds, -1 do ARGV[i] = nil end
""")
)
IMPORT_APPLY = _IMPORT_GUARD + APPLY
