-- The least a GCRA step in Redis can do: TIME, GET, SET with an expiry, on
-- microseconds as doubles (exact to 2^53 us, 285 years), refusals as the
-- wait. What paceline's step is measured against: the same three commands.
--
-- KEYS[1] the key; ARGV: T (us), tau (us). Reply: 0 granted, else the wait.
local t = redis.call('TIME')
local now = t[1] * 1000000 + t[2]
local tat = tonumber(redis.call('GET', KEYS[1])) or 0
local base = now - ARGV[2]
if tat > base then
  base = tat
end
if base > now then
  return base - now
end
local new_tat = base + ARGV[1]
redis.call('SET', KEYS[1], new_tat, 'PX', math.ceil((new_tat + ARGV[2] - now) / 1000) + 1)
return 0
