-- Write a snapshot unless a newer one is there, and its history point with the
-- CI part. KEYS: snapshot, then one history string per k of the point.
-- ARGV: version, number of CI field pairs, number of history keys (h), then
-- when h > 0: the point's time (unix seconds), the history keys' TTL (ms), the
-- number of tiers, (resolution, capacity) per tier, the record size, the
-- layout tag, then per history key (k, record); then the CI pairs..., then the
-- value pairs...
-- The CI part (json, CI bounds, version) is written when version >= the
-- stored `version`; the value part (point estimates, counters) when version
-- >= `live_version`, so two daemons never overwrite new numbers with old
-- ones. A k's history record is written with the CI part, once per version:
-- only when version > the snapshot field `history:k<k>`, so replicas that
-- write the same version write one point. A history string is a header (the
-- layout tag, the number of tiers, per tier (count, index of its oldest
-- record) as uint16s) and each tier's records in turn (stats/history.py); it
-- grows a record at a time until every tier is full.
local v = tonumber(ARGV[1])
local nci = tonumber(ARGV[2])
local nh = tonumber(ARGV[3])
local at = 4
local t, ttl, tiers, size, layout, records = 0, 0, {}, 0, 0, {}
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
  layout = tonumber(ARGV[at + 1])
  at = at + 2
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
  local header = 2 + 4 * #tiers
  for i = 1, nh do
    local key, field, record = KEYS[1 + i], 'history:k' .. records[i][1], records[i][2]
    if v > tonumber(redis.call('HGET', KEYS[1], field) or '-1') then
      -- The header, or a fresh one when the string is absent or of another layout.
      local counts, heads, total = {}, {}, 0
      local len = redis.call('STRLEN', key)
      if len >= header then
        local head = redis.call('GETRANGE', key, 0, header - 1)
        local tag, n = struct.unpack('>BB', head)
        if tag == layout and n == #tiers then
          for j = 1, #tiers do
            counts[j], heads[j] = struct.unpack('>HH', head, 3 + 4 * (j - 1))
            if counts[j] > tiers[j][2] then tag = -1 end
            total = total + counts[j]
          end
        end
        if tag ~= layout or n ~= #tiers or len ~= header + total * size then counts = {} end
      end
      if #counts == 0 then
        for j = 1, #tiers do counts[j], heads[j] = 0, 0 end
        redis.call('SET', key, string.rep('\0', header))
        len = header
      end
      local base = header
      for j, tier in ipairs(tiers) do
        local res, cap, n = tier[1], tier[2], counts[j]
        local bucket = math.floor(t / res)
        local fresh = true
        if n > 0 then
          -- The newest record: before the oldest once the ring is full, else the last.
          local offset = base + ((heads[j] - 1) % n) * size
          local held = redis.call('GETRANGE', key, offset, offset + size - 1)
          local ht = struct.unpack('>I4', held)
          local hb = math.floor(ht / res)
          if hb >= bucket then
            fresh = false
            if hb == bucket then
              -- The same bucket: its last snapshot (unless this one is older) and its minimum.
              local ma, mh = struct.unpack('>HH', held, 17)
              local na, nhat = struct.unpack('>HH', record, 17)
              local low = struct.pack('>HH', math.min(ma, na), math.min(mh, nhat))
              if t >= ht then
                redis.call('SETRANGE', key, offset, string.sub(record, 1, 16) .. low)
              else
                redis.call('SETRANGE', key, offset + 16, low)
              end
            end
          end
        end
        if fresh then
          if n < cap then
            -- Grow: insert after the tier's last record, moving the coarser tiers behind
            -- it. SET, not APPEND or SETRANGE: those leave the string room to grow into
            -- (up to its length again), and a history must cost what it holds.
            local at_ = base + n * size
            local whole = redis.call('GET', key)
            redis.call('SET', key, string.sub(whole, 1, at_) .. record .. string.sub(whole, at_ + 1))
            len = len + size
            n = n + 1
            counts[j], heads[j] = n, n % cap
          else
            redis.call('SETRANGE', key, base + heads[j] * size, record)
            heads[j] = (heads[j] + 1) % cap
          end
        end
        base = base + counts[j] * size
      end
      local head = struct.pack('>BB', layout, #tiers)
      for j = 1, #tiers do head = head .. struct.pack('>HH', counts[j], heads[j]) end
      redis.call('SETRANGE', key, 0, head)
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
