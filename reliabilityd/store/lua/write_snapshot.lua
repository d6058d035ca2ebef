-- Write a snapshot unless a newer one is there, and its history point with the
-- CI part. KEYS: snapshot, then one history string per k of the point.
-- ARGV: version, number of CI field pairs, number of history keys (h), then
-- when h > 0: the point's time (unix seconds), the history keys' TTL (ms), the
-- number of tiers, (resolution, capacity) per tier, the record size, then per
-- history key (k, record); then the CI pairs..., then the value pairs...
-- The CI part (json, CI bounds, version) is written when version >= the
-- stored `version`; the value part (point estimates, counters) when version
-- >= `live_version`, so two daemons never overwrite new numbers with old
-- ones. A k's history record is written with the CI part, once per version:
-- only when version > the snapshot field `history:k<k>`, so replicas that
-- write the same version write one point.
local v = tonumber(ARGV[1])
local nci = tonumber(ARGV[2])
local nh = tonumber(ARGV[3])
local at = 4
local t, ttl, tiers, size, records = 0, 0, {}, 0, {}
if nh > 0 then
  t = tonumber(ARGV[4])
  ttl = ARGV[5]
  local ntier = tonumber(ARGV[6])
  at = 7
  for i = 1, ntier do
    tiers[i] = {tonumber(ARGV[at]), tonumber(ARGV[at + 1])}
    at = at + 2
  end
  size = tonumber(ARGV[at])
  at = at + 1
  for i = 1, nh do
    records[i] = {ARGV[at], ARGV[at + 1]}
    at = at + 2
  end
end
local wrote = 0
if nci > 0 and v >= tonumber(redis.call('HGET', KEYS[1], 'version') or '-1') then
  local args = {}
  for i = at, at + 2 * nci - 1 do args[#args + 1] = ARGV[i] end
  redis.call('HSET', KEYS[1], 'version', v, unpack(args))
  wrote = 1
  local slots = 0
  for _, tier in ipairs(tiers) do slots = slots + tier[2] end
  for i = 1, nh do
    local key, field, record = KEYS[1 + i], 'history:k' .. records[i][1], records[i][2]
    if v > tonumber(redis.call('HGET', KEYS[1], field) or '-1') then
      -- The whole string at once: it never grows, so its memory is fixed from the first point.
      if redis.call('STRLEN', key) ~= slots * size then
        redis.call('SET', key, string.rep('\0', slots * size))
      end
      local base = 0
      for _, tier in ipairs(tiers) do
        local offset = (base + math.floor(t / tier[1]) % tier[2]) * size
        local held = struct.unpack('>I4', redis.call('GETRANGE', key, offset, offset + 3))
        if t >= held then redis.call('SETRANGE', key, offset, record) end
        base = base + tier[2]
      end
      redis.call('PEXPIRE', key, ttl)
      redis.call('HSET', KEYS[1], field, v)
    end
  end
end
local vstart = at + 2 * nci
if #ARGV >= vstart and v >= tonumber(redis.call('HGET', KEYS[1], 'live_version') or '-1') then
  local args = {}
  for i = vstart, #ARGV do args[#args + 1] = ARGV[i] end
  redis.call('HSET', KEYS[1], 'live_version', v, unpack(args))
  wrote = wrote + 2
end
return wrote
