-- paceline's step (src/schedule.rs), run atomically inside Redis.
--
-- KEYS[1]  the bucket: `tat` as a decimal u64 string; absent means at rest
-- ARGV[1]  "take" (store the grant) or "peek" (store nothing, return tat)
-- ARGV[2]  lead = (cost - 1) * T, ns
-- ARGV[3]  span = cost * T, ns ("0" for a cost of 0)
-- ARGV[4]  tau  = slack * T, ns
-- ARGV[5]  the longest wait admitted, ns; "" admits every request
-- ARGV[6]  "1" when a refusal is ExceedsBurst (the client knows: the cost
--          does not fit within ARGV[5] even at rest), else "0"
-- ARGV[7]  now, internal ns, for tests; "" reads the server's TIME.
--          With it, the key is stored without expiry (expiry runs on the
--          real clock) and the TTL it would have had is returned instead.
--
-- Replies (all strings): {"1", slot, now, ttl_ms} granted; {"0", wait}
-- refused, retry after `wait` ns; {"2"} refused, exceeds the burst;
-- {"3", tat, now} for a peek.
--
-- Arithmetic. Times are u64 ns with ORIGIN = 2^62 added (about 2^62.4 today)
-- and saturate at 2^64 - 1, but a Lua 5.1 number is a double, exact only up
-- to 2^53. So every time is a pair {s, n} = s * 10^9 + n with 0 <= n < 10^9:
-- s stays below 1.9 * 10^10 and n below 10^9, so every sum and difference of
-- two parts is an exact double, and a carry or borrow moves 10^9 between them.
-- The decimal strings Redis carries split into pairs at their ninth digit
-- from the right, and pairs print back with the low part zero-padded, so the
-- state and every argument cross the boundary exactly. Only add, subtract and
-- compare are needed: the products (cost * T, slack * T) are the client's.

local B = 1000000000
local MAX = { 18446744073, 709551615 } -- 2^64 - 1
local ZERO = { 0, 0 }
local FULL = { 0, 1 } -- schedule::FULL: at rest, any time long past
local ORIGIN = { 4611686018, 427387904 } -- 2^62
-- Extra TTL over the exact time to rest: Redis expires keys on a millisecond
-- clock sampled when the script starts, up to 1 ms behind TIME. A key that
-- lives a little longer still decides exactly; one that vanished early would
-- not.
local TTL_MARGIN_MS = 2

local function parse(x)
  local len = string.len(x)
  if len <= 9 then
    return { 0, tonumber(x) }
  end
  return { tonumber(string.sub(x, 1, len - 9)), tonumber(string.sub(x, len - 8)) }
end

local function show(a)
  if a[1] == 0 then
    return string.format('%d', a[2])
  end
  return string.format('%d%09d', a[1], a[2])
end

local function lt(a, b)
  return a[1] < b[1] or (a[1] == b[1] and a[2] < b[2])
end

local function eq(a, b)
  return a[1] == b[1] and a[2] == b[2]
end

local function add(a, b) -- saturating at 2^64 - 1
  local s, n = a[1] + b[1], a[2] + b[2]
  if n >= B then
    s, n = s + 1, n - B
  end
  local r = { s, n }
  if lt(MAX, r) then
    return MAX
  end
  return r
end

local function sub(a, b) -- saturating at 0
  if lt(a, b) then
    return ZERO
  end
  local s, n = a[1] - b[1], a[2] - b[2]
  if n < 0 then
    s, n = s - 1, n + B
  end
  return { s, n }
end

local key = KEYS[1]
local lead, span, tau = parse(ARGV[2]), parse(ARGV[3]), parse(ARGV[4])
local test_now = ARGV[7] ~= ''

local now
if test_now then
  now = parse(ARGV[7])
else
  -- Redis < 5 refuses a write after TIME unless effects are replicated.
  if redis.replicate_commands then
    redis.replicate_commands()
  end
  local t = redis.call('TIME') -- { seconds, microseconds }
  now = add(ORIGIN, { tonumber(t[1]), tonumber(t[2]) * 1000 })
end

local tat = FULL
local raw = redis.call('GET', key)
if raw then
  if not string.match(raw, '^%d+$') or string.len(raw) > 20 or lt(MAX, parse(raw)) then
    return redis.error_reply('paceline: key ' .. key .. ' holds ' .. raw .. ', not a paceline state')
  end
  tat = parse(raw)
end

if ARGV[1] == 'peek' then
  return { '3', show(tat), show(now) }
end

-- A cost of 0: admitted now, nothing stored.
if eq(span, ZERO) then
  return { '1', show(now), show(now), '0' }
end

-- base = max(tat, now - tau); a FRESH state (0) starts at now.
local base
if eq(tat, ZERO) then
  base = now
else
  base = sub(now, tau)
  if lt(base, tat) then
    base = tat
  end
end
local slot = add(base, lead)

if ARGV[5] ~= '' then
  local wait = sub(slot, now)
  if lt(parse(ARGV[5]), wait) then
    if ARGV[6] == '1' then
      return { '2' }
    end
    return { '0', show(wait) }
  end
end

local nxt = add(base, span)
-- Until the bucket is back at rest (now - tau >= nxt); absent decides alike.
local rest = sub(add(nxt, tau), now)
local ttl = rest[1] * 1000 + math.ceil(rest[2] / 1000000) + TTL_MARGIN_MS
if test_now then
  redis.call('SET', key, show(nxt))
else
  redis.call('SET', key, show(nxt), 'PX', ttl)
end
return { '1', show(slot), show(now), string.format('%d', ttl) }
