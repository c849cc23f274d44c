-- paceline's step (src/schedule.rs), run atomically inside Redis.
--
-- KEYS[1]  the bucket: `tat` as a decimal u64 string; absent means at rest
-- ARGV[1]  "take" (store the grant), "peek" (store nothing, return tat) or
--          "give" (undo a grant whose waiter was cancelled; see below)
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
-- Replies (all strings): {"1", slot, now, ttl_ms, prev, next} granted, where
-- `prev` is the state the grant replaced ("" when the key was absent) and
-- `next` the state it stored (both absent for a cost of 0, which stores
-- nothing); {"0", wait} refused, retry after `wait` ns; {"2"} refused,
-- exceeds the burst; {"3", tat, now} for a peek; {"4"} refused, saturated;
-- {"5", "1"} given back, {"5", "0"} not (someone took since, or the key
-- expired).
--
-- "give" undoes one grant: ARGV[4] is tau, ARGV[5] the grant's `next` and
-- ARGV[6] its `prev`. Only while the key still holds `next` exactly (no one
-- has taken since) is it put back to `prev`, with `prev`'s time to rest as
-- its TTL; otherwise nothing changes. x/time/rate's `Reservation.Cancel`,
-- done where the state lives.
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
local MAX_S, MAX_N = 18446744073, 709551615 -- 2^64 - 1
-- schedule::MAX_TAT: the largest state the step stores (slots saturate at
-- 2^64 - 1, the state 2^16 ns below it).
local TAT_S, TAT_N = 18446744073, 709486079
local ORIGIN_S, ORIGIN_N = 4611686018, 427387904 -- 2^62
-- Extra TTL over the exact time to rest: Redis expires keys on a millisecond
-- clock sampled when the script starts, up to 1 ms behind TIME. A key that
-- lives a little longer still decides exactly; one that vanished early would
-- not.
local TTL_MARGIN_MS = 2

-- A pair travels as two values (multiple returns), not a table: no garbage,
-- which is most of what a call costs beyond its round trip.

local function parse(x)
  local len = string.len(x)
  if len <= 9 then
    return 0, tonumber(x)
  end
  return tonumber(string.sub(x, 1, len - 9)), tonumber(string.sub(x, len - 8))
end

local function show(s, n)
  if s == 0 then
    return string.format('%d', n)
  end
  return string.format('%d%09d', s, n)
end

local function lt(as, an, bs, bn)
  return as < bs or (as == bs and an < bn)
end

local function add(as, an, bs, bn) -- saturating at 2^64 - 1
  local s, n = as + bs, an + bn
  if n >= B then
    s, n = s + 1, n - B
  end
  if lt(MAX_S, MAX_N, s, n) then
    return MAX_S, MAX_N
  end
  return s, n
end

local function sub(as, an, bs, bn) -- saturating at 0
  if lt(as, an, bs, bn) then
    return 0, 0
  end
  local s, n = as - bs, an - bn
  if n < 0 then
    s, n = s - 1, n + B
  end
  return s, n
end

-- The TTL, ms, of a key holding `tat`: until the bucket is back at rest
-- (now - tau >= tat), after which an absent key decides alike. Also whether
-- it is at rest already.
local function ttl_ms(tat_s, tat_n, tau_s, tau_n, now_s, now_n)
  local rest_s, rest_n = add(tat_s, tat_n, tau_s, tau_n)
  rest_s, rest_n = sub(rest_s, rest_n, now_s, now_n)
  local at_rest = rest_s == 0 and rest_n == 0
  return rest_s * 1000 + math.ceil(rest_n / 1000000) + TTL_MARGIN_MS, at_rest
end

local key = KEYS[1]
local lead_s, lead_n = parse(ARGV[2])
local span_s, span_n = parse(ARGV[3])
local tau_s, tau_n = parse(ARGV[4])
local test_now = ARGV[7] ~= ''

local now_s, now_n
if test_now then
  now_s, now_n = parse(ARGV[7])
else
  -- Redis < 5 refuses a write after TIME unless effects are replicated.
  if redis.replicate_commands then
    redis.replicate_commands()
  end
  local t = redis.call('TIME') -- { seconds, microseconds }
  now_s, now_n = add(ORIGIN_S, ORIGIN_N, tonumber(t[1]), tonumber(t[2]) * 1000)
end

-- Absent: at rest (schedule::FULL, any time long past).
local tat_s, tat_n = 0, 1
-- At most 21 bytes: a state is at most 20 digits, and a huge value stored
-- under the key by something else must not be copied on every call (that
-- would stall the server, every key's calls with it). An empty value reads
-- as absent: at rest, and overwritten by the next grant.
local raw = redis.call('GETRANGE', key, 0, 20)
if raw == '' then
  raw = false
end
if raw then
  local ok = string.len(raw) <= 20 and string.find(raw, '^%d+$')
  if ok then
    tat_s, tat_n = parse(raw)
    ok = not lt(MAX_S, MAX_N, tat_s, tat_n)
  end
  if not ok then
    -- Never echo the value: it may be huge or not UTF-8, and an error the
    -- client cannot parse would break its connection for every key.
    local size = redis.call('STRLEN', key)
    return redis.error_reply('paceline: key ' .. key .. ' holds a value of ' .. size .. ' bytes that is not a paceline state')
  end
end

if ARGV[1] == 'give' then
  if raw ~= ARGV[5] then
    return { '5', '0' }
  end
  local ttl, at_rest = 0, true
  if ARGV[6] ~= '' then
    local prev_s, prev_n = parse(ARGV[6])
    ttl, at_rest = ttl_ms(prev_s, prev_n, tau_s, tau_n, now_s, now_n)
  end
  if at_rest then
    -- Back to a bucket at rest: an absent key is one.
    redis.call('DEL', key)
  elseif test_now then
    redis.call('SET', key, ARGV[6])
  else
    redis.call('SET', key, ARGV[6], 'PX', ttl)
  end
  return { '5', '1' }
end

if ARGV[1] == 'peek' then
  return { '3', show(tat_s, tat_n), show(now_s, now_n) }
end

-- A cost of 0: admitted now, nothing stored.
if span_s == 0 and span_n == 0 then
  local now = show(now_s, now_n)
  return { '1', now, now, '0' }
end

-- base = max(tat, now - tau). A FRESH state (0) is decided as at rest but
-- keeps no credit: base = now - min(lead, tau), so the next slot is one
-- interval after this one.
local base_s, base_n
if tat_s == 0 and tat_n == 0 then
  local back_s, back_n = lead_s, lead_n
  if lt(tau_s, tau_n, back_s, back_n) then
    back_s, back_n = tau_s, tau_n
  end
  base_s, base_n = sub(now_s, now_n, back_s, back_n)
else
  base_s, base_n = sub(now_s, now_n, tau_s, tau_n)
  if lt(base_s, base_n, tat_s, tat_n) then
    base_s, base_n = tat_s, tat_n
  end
end
local slot_s, slot_n = add(base_s, base_n, lead_s, lead_n)

-- Past the end of internal time nothing is scheduled (schedule::Deny::Saturated).
local next_s, next_n = add(base_s, base_n, span_s, span_n)
if lt(TAT_S, TAT_N, next_s, next_n) then
  return { '4' }
end

if ARGV[5] ~= '' then
  local wait_s, wait_n = sub(slot_s, slot_n, now_s, now_n)
  local max_s, max_n = parse(ARGV[5])
  if lt(max_s, max_n, wait_s, wait_n) then
    if ARGV[6] == '1' then
      return { '2' }
    end
    return { '0', show(wait_s, wait_n) }
  end
end

-- Until the bucket is back at rest (now - tau >= next); absent decides alike.
local ttl = ttl_ms(next_s, next_n, tau_s, tau_n, now_s, now_n)
local state = show(next_s, next_n)
if test_now then
  redis.call('SET', key, state)
else
  redis.call('SET', key, state, 'PX', ttl)
end
return { '1', show(slot_s, slot_n), show(now_s, now_n), string.format('%d', ttl), raw or '', state }
