-- The import guard's second half, after APPLY's argument check: drop what the
-- ledger holds, record the rest (see import_ledger.lua).
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
