-- APPLY's arguments in shape, before anything is written (see APPLY).
do
  local nb, wb, life = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
  local ns, ms, nl = tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8])
  local keep, cap = tonumber(ARGV[9]), tonumber(ARGV[10])
  local n = ns and nl and (#ARGV - 11 - ns - nl) / 4
  if not n or n ~= math.floor(n) or n < 0 or not nb or not wb or wb < 1 or wb > nb
    or #KEYS ~= 8 + 5 * ns + nb or not ms or ms < 0 or not keep or not cap or cap < 1
    or not life or life < 1 or life > 4000000000 then
    return redis.error_reply('ERR reliabilityd apply: arguments out of shape')
  end
end
