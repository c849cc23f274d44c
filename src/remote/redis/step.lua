-- paceline's step (src/schedule.rs), run atomically inside Redis.
--
-- KEYS[1]  the bucket: `tat` as a decimal u64 string; absent means at rest
--          (any other value, an empty one too, is an error).
--
-- ARGV, by operation. Spans (ns) are one decimal each; every other time is
-- a pair of integers s, n for s * 10^9 + n, 0 <= n < 10^9 (see Arithmetic
-- below): "tau (2)" is two arguments.
--
--   "take", span, tau, lead, max, keep
--       span = cost * T (0 for a cost of 0), tau = slack * T, lead =
--       (cost - 1) * T, max = the longest wait admitted ("" admits every
--       request; "0" only a slot that is now, a try), keep = the tau the
--       state stored lives for (at least tau: a lease's lender decides at a
--       reduced slack, and keeps its states until at rest at the stated one)
--   "peek"
--   "give", tau (2), next, prev, prev (2)
--       undoes one grant whose waiter was cancelled: `next` is the state it
--       stored and `prev` the one it replaced, as decimal strings ("" when
--       the key was absent, and then "", "" for its pair). Only while the
--       key still holds `next` exactly (no one has taken since) is it put
--       back to `prev`, with `prev`'s time to rest as its TTL; otherwise
--       nothing changes. x/time/rate's `Reservation.Cancel`, done where the
--       state lives.
--   "settle", give, reach, T, went (2), span, tau, lead, "", keep
--       schedule::settle: a booking whose permit went at `went` settled
--       with its actual cost. An excess (span = (actual - booked) * T > 0;
--       2^64 - 1 for one over MAX_SPAN) is a "take" of it with the
--       arguments after `went`, admitted whatever its wait, that saturates
--       the state at MAX_TAT where a take is refused. A refund (span 0)
--       moves the state back by `give` (min((booked - actual) * T, reach),
--       made by the client), at most by `reach` (the booking's span, at
--       most tau + T) less the time since `went`, never below max(now -
--       tau, FULL + 1), and only once the permit has gone and every permit
--       booked has (tat <= now + T); a key absent, FRESH or FULL stays.
--       The state left is stored with a take's TTL if it changed.
--   "test", now (2), then one of the above with its name
--       tests only: decides at `now` (internal ns) instead of TIME, stores
--       the key without expiry (expiry runs on the real clock) and replies
--       as "take" does, with the TTL the key would have had.
--
-- Replies, all integers:
--   {1, slot (2), now (2) [, ttl_ms] [, prev (2)]}
--                        "take": granted; `ttl_ms` in
--                        tests only; `prev` is the state the grant replaced,
--                        absent when the key was (and for a cost of 0, which
--                        stores nothing). The state stored is slot + T,
--                        which the client knows.
--   {0, wait (2)}        refused, retry after `wait` ns (the client knows
--                        when that is ExceedsBurst instead)
--   {4}                  refused, saturated (past MAX_TAT)
--   {3, tat (2), now (2)}  a peek
--   {5, 1} / {5, 0}      given back / not (someone took since, or the key
--                        expired)
--   {6, tat (2), now (2) [, ttl_ms]}
--                        "settle": the state left (as found if unchanged)
--
-- Arithmetic. Times are u64 ns with ORIGIN = 2^62 added (about 2^62.4 today)
-- and saturate at 2^64 - 1, but a Lua 5.1 number is a double, exact only up
-- to 2^53. So every time is a pair as above: s stays below 1.9 * 10^10 and n
-- below 10^9, so every sum and difference of two parts is an exact double,
-- and a carry or borrow moves 10^9 between them. Only add, subtract and
-- compare are needed: the products (cost * T, slack * T) are the client's.
--
-- Cost. The step runs on every call, on the server's one thread, so it is
-- written for the Lua VM (measured: benches/examples/redis_cpu.rs): no
-- helper functions (a script's body runs afresh on every call, and would
-- build each closure again); numbers from strings by arithmetic (`x + 0`)
-- rather than calls, and from as few strings as can carry them; integer
-- replies (a number formatted in Lua costs more than the rest of the
-- arithmetic together), and only what the caller needs; one string built
-- per call, the state stored.

local B = 1000000000
local MAX_S, MAX_N = 18446744073, 709551615 -- 2^64 - 1
local argv = ARGV
local key = KEYS[1]

-- The operation, and where its arguments start.
local op, a = argv[1], 2
local test = op == 'test'
if test then
  op, a = argv[4], 5
end
if op ~= 'take' and op ~= 'peek' and op ~= 'give' and op ~= 'settle' then
  return redis.error_reply('paceline: unknown operation ' .. tostring(op))
end

-- The clock: the test's `now`, or TIME plus ORIGIN (2^62 = 4611686018 s
-- and 427387904 ns).
local now_s, now_n
if test then
  now_s, now_n = argv[2] + 0, argv[3] + 0
else
  -- Redis < 5 refuses a write after TIME unless effects are replicated;
  -- from 5 on they are (and Redis 7, which names its version, need not be
  -- asked).
  if not redis.REDIS_VERSION_NUM and redis.replicate_commands then
    redis.replicate_commands()
  end
  local t = redis.call('TIME') -- { seconds, microseconds }
  now_s, now_n = t[1] + 4611686018, t[2] * 1000 + 427387904
  if now_n >= B then
    now_s, now_n = now_s + 1, now_n - B
  end
end

-- The state. Absent: at rest (schedule::FULL, any time long past). At most
-- 21 bytes are read: a state is at most 20 digits, and a huge value stored
-- under the key by something else must not be copied on every call (that
-- would stall the server, every key's calls with it). GETRANGE reads an
-- empty value as it reads an absent key: only then is EXISTS asked which it
-- is, and an empty value is foreign like any other (not a fresh key, to be
-- granted a burst and overwritten).
local raw = redis.call('GETRANGE', key, '0', '20')
local tat_s, tat_n = 0, 1
-- The state's digits before its last nine, when it has more than nine.
local hi = ''
if raw ~= '' or redis.call('EXISTS', key) == 1 then
  local _, len = string.find(raw, '^%d+$')
  local ok = len and len <= 20
  if ok then
    if len > 9 then
      hi = string.sub(raw, 1, -10)
      tat_s, tat_n = hi + 0, string.sub(raw, -9) + 0
      ok = tat_s < MAX_S or (tat_s == MAX_S and tat_n <= MAX_N)
    else
      tat_s, tat_n = 0, raw + 0
    end
  end
  if not ok then
    -- Never echo the value: it may be huge or not UTF-8, and an error the
    -- client cannot parse would break its connection for every key.
    local size = redis.call('STRLEN', key)
    return redis.error_reply('paceline: key ' .. key .. ' holds a value of ' .. size .. ' bytes that is not a paceline state')
  end
end

-- A settle's excess is a take of it, its arguments after `went`.
local charge = op == 'settle' and argv[a + 5] ~= '0'
if charge then
  op, a = 'take', a + 5
end

if op == 'take' then
  -- lead, span, tau (and max): one decimal each. Up to 15 digits (below
  -- 2^53) a double holds one exactly, and `% B` splits it exactly (x / B is
  -- below 2^20, so it is never rounded up to the next integer); longer ones
  -- (11.6 days and more) are split as strings.
  local x = argv[a]
  local span_s, span_n
  if #x <= 15 then
    x = x + 0
    span_n = x % B
    span_s = (x - span_n) / B
  else
    span_s, span_n = string.sub(x, 1, -10) + 0, string.sub(x, -9) + 0
  end
  -- A cost of 0: admitted now, nothing stored.
  if span_s == 0 and span_n == 0 then
    if test then
      return { 1, now_s, now_n, now_s, now_n, 0 }
    end
    return { 1, now_s, now_n, now_s, now_n }
  end
  -- (A cost of 1 leads by 0: nothing to read.)
  local lead_s, lead_n = 0, 0
  x = argv[a + 2]
  if x and x ~= '0' then
    if #x <= 15 then
      x = x + 0
      lead_n = x % B
      lead_s = (x - lead_n) / B
    else
      lead_s, lead_n = string.sub(x, 1, -10) + 0, string.sub(x, -9) + 0
    end
  end
  x = argv[a + 1]
  local tau_s, tau_n
  if #x <= 15 then
    x = x + 0
    tau_n = x % B
    tau_s = (x - tau_n) / B
  else
    tau_s, tau_n = string.sub(x, 1, -10) + 0, string.sub(x, -9) + 0
  end

  -- base = max(tat, now - tau). A FRESH state (0) is decided as at rest but
  -- keeps no credit: base = now - min(lead, tau), so the next slot is one
  -- interval after this one.
  local fresh = tat_s == 0 and tat_n == 0
  local back_s, back_n = tau_s, tau_n
  if fresh and (lead_s < tau_s or (lead_s == tau_s and lead_n < tau_n)) then
    back_s, back_n = lead_s, lead_n
  end
  local base_s, base_n = now_s - back_s, now_n - back_n
  if base_n < 0 then
    base_s, base_n = base_s - 1, base_n + B
  end
  if base_s < 0 then -- saturating at 0
    base_s, base_n = 0, 0
  end
  if not fresh and (base_s < tat_s or (base_s == tat_s and base_n < tat_n)) then
    base_s, base_n = tat_s, tat_n
  end

  -- next = base + span. Past the end of internal time nothing is scheduled
  -- (schedule::MAX_TAT, 2^64 - 1 - 2^16: Deny::Saturated).
  local next_s, next_n = base_s + span_s, base_n + span_n
  if next_n >= B then
    next_s, next_n = next_s + 1, next_n - B
  end
  if next_s > MAX_S or (next_s == MAX_S and next_n > 709486079) then
    if not charge then
      return { 4 }
    end
    -- An excess is never refused: the state saturates.
    next_s, next_n = MAX_S, 709486079
  end
  -- slot = base + lead (= next - T: below next, so it cannot saturate).
  local slot_s, slot_n = base_s + lead_s, base_n + lead_n
  if slot_n >= B then
    slot_s, slot_n = slot_s + 1, slot_n - B
  end

  -- Admitted only if the wait, slot - now, is at most max, the last
  -- argument ("" admits every request).
  x = argv[a + 3]
  if x ~= '' then
    local wait_s, wait_n = slot_s - now_s, slot_n - now_n
    if wait_n < 0 then
      wait_s, wait_n = wait_s - 1, wait_n + B
    end
    -- (A slot in the past waits 0, which any max admits.)
    if wait_s >= 0 and (wait_s > 0 or wait_n > 0) then
      local max_s, max_n
      if #x <= 15 then
        x = x + 0
        max_n = x % B
        max_s = (x - max_n) / B
      else
        max_s, max_n = string.sub(x, 1, -10) + 0, string.sub(x, -9) + 0
      end
      if wait_s > max_s or (wait_s == max_s and wait_n > max_n) then
        return { 0, wait_s, wait_n }
      end
    end
  end

  -- The TTL, ms: until the bucket is back at rest at keep, min(next + keep,
  -- 2^64 - 1) - now (after which an absent key decides alike, at any slack
  -- up to keep's), rounded up, plus 2 ms: Redis expires keys on a
  -- millisecond clock sampled when the script starts, up to 1 ms behind
  -- TIME. A key that lives a little longer still decides exactly; one that
  -- vanished early would not. (keep is most often tau's own decimal, read
  -- above: only another is split.)
  x = argv[a + 4]
  if x ~= argv[a + 1] then
    if #x <= 15 then
      x = x + 0
      tau_n = x % B
      tau_s = (x - tau_n) / B
    else
      tau_s, tau_n = string.sub(x, 1, -10) + 0, string.sub(x, -9) + 0
    end
  end
  local rest_s, rest_n = next_s + tau_s, next_n + tau_n
  if rest_n >= B then
    rest_s, rest_n = rest_s + 1, rest_n - B
  end
  if rest_s > MAX_S or (rest_s == MAX_S and rest_n > MAX_N) then
    rest_s, rest_n = MAX_S, MAX_N
  end
  rest_s, rest_n = rest_s - now_s, rest_n - now_n
  if rest_n < 0 then
    rest_s, rest_n = rest_s - 1, rest_n + B
  end
  if rest_s < 0 then
    rest_s, rest_n = 0, 0
  end
  -- (rest_n / 10^6 rounded up, by % rather than a call: exact, as
  -- rest_n + 999999 < 2^31.)
  local ttl = rest_n + 999999
  ttl = rest_s * 1000 + (ttl - ttl % 1000000) / 1000000 + 2

  -- The state stored, in decimal. Its leading digits are most often the
  -- old state's (the same second): those are reused, if written without
  -- leading zeros (10 digits from 10^9 s, 11 from 10^10 s), and only the
  -- last nine formatted.
  local state
  if next_s == tat_s and tat_s >= 1000000000 and (#hi == 10 or tat_s >= 10000000000) then
    state = hi .. string.format('%09d', next_n)
  elseif next_s == 0 then
    state = string.format('%d', next_n)
  else
    state = string.format('%d%09d', next_s, next_n)
  end
  if test then
    redis.call('SET', key, state)
    if charge then
      return { 6, next_s, next_n, now_s, now_n, ttl }
    end
    if raw == '' then
      return { 1, slot_s, slot_n, now_s, now_n, ttl }
    end
    return { 1, slot_s, slot_n, now_s, now_n, ttl, tat_s, tat_n }
  end
  redis.call('SET', key, state, 'PX', ttl)
  if charge then
    return { 6, next_s, next_n, now_s, now_n }
  end
  if raw == '' then
    return { 1, slot_s, slot_n, now_s, now_n }
  end
  return { 1, slot_s, slot_n, now_s, now_n, tat_s, tat_n }
end

if op == 'peek' then
  return { 3, tat_s, tat_n, now_s, now_n }
end

if op == 'settle' then
  -- A refund. (Rarer than a take: a helper is fine here.)
  local function split(x)
    if #x <= 15 then
      x = x + 0
      local n = x % B
      return (x - n) / B, n
    end
    return string.sub(x, 1, -10) + 0, string.sub(x, -9) + 0
  end
  -- The estimate stands on a key at rest, absent or FRESH (nothing to
  -- bank), while the permit has not gone, and while takes wait behind
  -- the schedule (tat > now + T).
  local went_s, went_n = argv[a + 3] + 0, argv[a + 4] + 0
  local same = (tat_s == 0 and tat_n <= 1)
    or went_s > now_s or (went_s == now_s and went_n > now_n)
  if not same then
    local t_s, t_n = split(argv[a + 2])
    t_s, t_n = now_s + t_s, now_n + t_n
    if t_n >= B then
      t_s, t_n = t_s + 1, t_n - B
    end
    same = tat_s > t_s or (tat_s == t_s and tat_n > t_n)
  end
  if same then
    return { 6, tat_s, tat_n, now_s, now_n }
  end
  -- back = min(give, reach - (now - went)), the room at least 0.
  local r_s, r_n = split(argv[a + 1])
  r_s, r_n = r_s - (now_s - went_s), r_n - (now_n - went_n)
  while r_n < 0 do
    r_s, r_n = r_s - 1, r_n + B
  end
  while r_n >= B do
    r_s, r_n = r_s + 1, r_n - B
  end
  if r_s < 0 then
    r_s, r_n = 0, 0
  end
  local back_s, back_n = split(argv[a])
  if r_s < back_s or (r_s == back_s and r_n < back_n) then
    back_s, back_n = r_s, r_n
  end
  -- The state moved back, saturating at 0 ...
  local new_s, new_n = tat_s - back_s, tat_n - back_n
  if new_n < 0 then
    new_s, new_n = new_s - 1, new_n + B
  end
  if new_s < 0 then
    new_s, new_n = 0, 0
  end
  -- ... never below min(tat, max(now - tau, FULL + 1)).
  local f_s, f_n = split(argv[a + 6])
  f_s, f_n = now_s - f_s, now_n - f_n
  if f_n < 0 then
    f_s, f_n = f_s - 1, f_n + B
  end
  if f_s < 0 or (f_s == 0 and f_n < 2) then
    f_s, f_n = 0, 2
  end
  if tat_s < f_s or (tat_s == f_s and tat_n < f_n) then
    f_s, f_n = tat_s, tat_n
  end
  if new_s < f_s or (new_s == f_s and new_n < f_n) then
    new_s, new_n = f_s, f_n
  end
  if new_s == tat_s and new_n == tat_n then
    return { 6, tat_s, tat_n, now_s, now_n }
  end
  -- Kept as a take keeps its state: until at rest at keep.
  local k_s, k_n = split(argv[a + 9])
  local rest_s, rest_n = new_s + k_s, new_n + k_n
  if rest_n >= B then
    rest_s, rest_n = rest_s + 1, rest_n - B
  end
  if rest_s > MAX_S or (rest_s == MAX_S and rest_n > MAX_N) then
    rest_s, rest_n = MAX_S, MAX_N
  end
  rest_s, rest_n = rest_s - now_s, rest_n - now_n
  if rest_n < 0 then
    rest_s, rest_n = rest_s - 1, rest_n + B
  end
  if rest_s < 0 then
    rest_s, rest_n = 0, 0
  end
  local ttl = rest_n + 999999
  ttl = rest_s * 1000 + (ttl - ttl % 1000000) / 1000000 + 2
  local state
  if new_s == 0 then
    state = string.format('%d', new_n)
  else
    state = string.format('%d%09d', new_s, new_n)
  end
  if test then
    redis.call('SET', key, state)
    return { 6, new_s, new_n, now_s, now_n, ttl }
  end
  redis.call('SET', key, state, 'PX', ttl)
  return { 6, new_s, new_n, now_s, now_n }
end

-- "give"
if raw ~= argv[a + 2] then
  return { 5, 0 }
end
local prev_s = argv[a + 4]
if prev_s ~= '' then
  -- The TTL of `prev`, as a take's above; none once it is at rest.
  local rest_s, rest_n = prev_s + argv[a], argv[a + 5] + argv[a + 1]
  if rest_n >= B then
    rest_s, rest_n = rest_s + 1, rest_n - B
  end
  if rest_s > MAX_S or (rest_s == MAX_S and rest_n > MAX_N) then
    rest_s, rest_n = MAX_S, MAX_N
  end
  rest_s, rest_n = rest_s - now_s, rest_n - now_n
  if rest_n < 0 then
    rest_s, rest_n = rest_s - 1, rest_n + B
  end
  if rest_s >= 0 and (rest_s > 0 or rest_n > 0) then
    if test then
      redis.call('SET', key, argv[a + 3])
    else
      redis.call('SET', key, argv[a + 3], 'PX', rest_s * 1000 + math.ceil(rest_n / 1000000) + 2)
    end
    return { 5, 1 }
  end
end
-- Back to a bucket at rest: an absent key is one.
redis.call('DEL', key)
return { 5, 1 }
