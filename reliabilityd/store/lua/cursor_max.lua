-- Keep the largest committed stream entry id. KEYS: cursor. ARGV: entry id.
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
