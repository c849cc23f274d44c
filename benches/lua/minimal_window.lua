-- A minimal fixed-window counter, the usual one: the client names the
-- window in the key (`name:<window index>`), the script counts in it and
-- sets its expiry at the window's end on the first count.
--
-- KEYS[1] the window's key; ARGV: cost, quota, the window's end (Unix s).
-- Replies {1, count} admitted, {0, count} refused (the count given back).
local cost = tonumber(ARGV[1])
local n = redis.call('INCRBY', KEYS[1], cost)
if n == cost then
  redis.call('EXPIREAT', KEYS[1], ARGV[3])
end
if n > tonumber(ARGV[2]) then
  redis.call('DECRBY', KEYS[1], cost)
  return {0, n - cost}
end
return {1, n}
