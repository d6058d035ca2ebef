-- The import guard's second half, after APPLY's argument check: drop what the
-- ledger holds, record the rest (see import_ledger.lua). `origin` maps a kept
-- event's new position to its position in the chunk and `gone` lists the
-- dropped ones, so APPLY can tell which trial records are duplicates.
local head = 11 + tonumber(ARGV[6]) + tonumber(ARGV[8])
local origin, gone = {}, {}
local total = (#ARGV - head) / 4
local hex = string.rep('%02x', 16)
local ds, ps = {}, {}
for i = 1, total do
  local d = ARGV[head + i]
  if redis.call('HSETNX', ledger, string.format(hex, string.byte(d, 1, 16)), '1') == 1 then
    ds[#ds + 1] = d
    origin[#ds] = i
    local at = head + total + 3 * (i - 1)
    ps[#ps + 1] = ARGV[at + 1]
    ps[#ps + 1] = ARGV[at + 2]
    ps[#ps + 1] = ARGV[at + 3]
  else
    gone[#gone + 1] = i
  end
end
for i = 1, #ds do ARGV[head + i] = ds[i] end
for i = 1, #ps do ARGV[head + #ds + i] = ps[i] end
for i = #ARGV, head + 4 * #ds + 1, -1 do ARGV[i] = nil end
