-- APPLY's arguments in shape, before anything is written (see APPLY).
do
  local n, nb, wb, life = (#ARGV - 5) / 3, tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
  if n ~= math.floor(n) or not nb or not wb or wb < 1 or wb > nb or #KEYS ~= 4 + nb
    or not life or life < 1 or life > 4000000000 then
    return redis.error_reply('ERR reliabilityd apply: arguments out of shape')
  end
end
