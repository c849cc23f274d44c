-- paceline's window step (src/model/window.rs), run atomically inside
-- Redis: a quota of q permits per window of the server's clock.
--
-- KEYS[1]  the count of the window it holds, as one integer
--              v = f * 2^52 + r * 2^37 + c
--          c the count; r = 1 + (the window's index mod 32767), never 0;
--          f = 1 while the window has not started (a take that waits for
--          the next window counted there). The key expires at its window's
--          end (PXAT end - 1 ms: gone from the end's first ms on), so a key
--          present holds the window current on the server's clock or a
--          later one: its presence is the window's, and its expiry names
--          which (the index r abbreviates). Absent means nothing counted
--          in the current window. Any other value is an error, never a
--          fresh key.
--
-- ARGV: the operation, the window, then the operation's arguments.
--
--   window: quota, kind, width, offset, first, last
--       quota q (at most 2^36 - 1, checked by the client: the count's 37
--       bits hold q plus a cost); kind "f" (fixed: width its seconds), "d"
--       day, "w" week (width the first weekday, Monday 0 ... Sunday 6),
--       "m" month, "y" year; offset seconds east of UTC (0 for fixed);
--       first the calendar's number of the window holding the epoch
--       (window::Params; 0 for fixed); last the index of the window
--       holding the clock's end (u64::MAX ns), past which nothing is
--       granted.
--
--   "take", cost, max_s, max_n
--       window::step: counted in the current window while its count plus
--       cost is at most q, else in the next if the wait to its start is at
--       most max (max_s "" admits every wait). A cost of 0 stores nothing.
--   "peek"
--   "give", next_i, next_c, prev_i, prev_c
--       undoes a grant by the one rule: only while the key holds (next_i,
--       next_c) is it put back to (prev_i, prev_c), or deleted when those
--       are "" (the key was absent).
--   "settle", went_s, excess, refund, cap
--       window::settle: an excess is counted in the current window,
--       whatever its count, up to cap (the word's largest count, at most
--       2^36: a count plus a cost then stays under 2^37); a refund comes off the count,
--       never below 0, only while the window holding went_s (the
--       booking's permit's second) is the stored one and the current one.
--   "test", now_s, now_n, then one of the above with its arguments
--       tests only: decides at now (Unix time s, ns) instead of the
--       server's clock, with the key's expiry kept T0 ms ahead of the
--       test's and applied here at now.
--
-- The path of nearly every take: INCRBY, and a key that held a started
-- window with room is granted then and there, {1, v}: no clock read and
-- nothing else written, as cheap as the usual fixed-window counter. The
-- client reads (i, c) off v, the full index i the one r abbreviates
-- nearest its own clock's window. Every other take (a window's first,
-- one over the quota, one counted ahead) undoes its INCRBY and is decided
-- in full below, on TIME.
--
-- Replies, all integers (a time as s, ns):
--   {1, v [, now_s, now_n]}  "take" granted at once in the started window
--                        v holds (the clock in tests only); its state
--                        before was v - cost
--   {6, i, c, now_s, now_n [, prev_i, prev_c]}  "take" granted: counted in
--                        window i, which holds c; prev the state replaced,
--                        absent when the key was. For a cost of 0, (i, c) is
--                        the state found, unchanged.
--   {0, wait_s, wait_n}  refused: the next window starts in wait
--   {2}                  refused: the cost is over the quota
--   {4}                  refused: the window is past the clock's end
--   {3, i, c, now_s, now_n}  a peek, and a settle's state left
--   {5, 1} / {5, 0}      given back / not
--
-- Arithmetic. Every number here is an integer below 2^53, exact in a
-- double: v, times in whole seconds (every window starts on a whole
-- second; Unix seconds stay below 2^35) or ms, days and window numbers
-- (below 2^35), counts. Each division is of such integers, with a
-- positive divisor, so math.floor(a / b) is the exact floor: the quotient
-- is off an integer by at least 1 / b, which is more than half its ulp
-- while |a| < 2^52 (v / 2^37 is exact: a power of two). The calendar is
-- Howard Hinnant's civil-date arithmetic, as src/model/calendar.rs
-- writes it.
--
-- The server's clock. A key lives until its window's end, on the clock
-- Redis expires keys by. One stepped back keeps every key it holds (each
-- expires at an instant, not after a span): a window spent stays spent,
-- and a take in it goes at once. One that jumps past a window's end
-- before the next call ends that window, and stepped back again before a
-- call finds no key: the window it lands in starts afresh.
--
-- Why a script of its own: the pacing step (step.lua) is written for the
-- fewest instructions on its hot path and keeps a decimal string; a window
-- keeps a count and a calendar. A branch would make every pacing call
-- parse past the other, and neither reads the other's keys.

local C = 137438953472 -- 2^37: the count's unit of r
local F = 4503599627370496 -- 2^52: f
local R = 32767 -- r runs 1 ..= R
local T0 = 2199023255552 -- 2^41 ms (2039): tests' expiries, ahead of any clock
local argv = ARGV
local key = KEYS[1]

local op, a = argv[1], 2
local test = op == 'test'
local now_s, now_n
if test then
  op, a = argv[4], 5
  now_s, now_n = argv[2] + 0, argv[3] + 0
  -- Redis's expiry, at the test's clock.
  local e = redis.call('PEXPIRETIME', key)
  if e >= 0 and now_s * 1000 + math.floor(now_n / 1000000) > e - T0 then
    redis.call('DEL', key)
  end
end
local quota = argv[a] + 0

-- The path of nearly every take.
local cost, n
if op == 'take' then
  cost = argv[a + 6] + 0
  if cost > quota then
    return {2}
  end
  if cost > 0 then
    n = redis.call('INCRBY', key, cost)
    if n >= C and n < F and n % C <= quota then
      if test then
        return {1, n, now_s, now_n}
      end
      return {1, n}
    end
  end
elseif op ~= 'peek' and op ~= 'give' and op ~= 'settle' then
  return redis.error_reply('paceline: unknown operation ' .. tostring(op))
end

local floor = math.floor
local DAY = 86400
local kind, width, offset = argv[a + 1], argv[a + 2] + 0, argv[a + 3] + 0
local first, last = argv[a + 4] + 0, argv[a + 5] + 0
a = a + 6

-- The state before: v, and its expiry (ms; -1 none). A take's INCRBY is
-- undone first.
local v, e
if n then
  v = n - cost
  if v == 0 then
    redis.call('DEL', key)
  else
    redis.call('DECRBY', key, cost)
  end
else
  v = tonumber(redis.call('GET', key) or '0')
end
if v ~= 0 then
  e = redis.call('PEXPIRETIME', key)
end

local function not_window()
  return redis.error_reply('paceline: key ' .. key .. ' holds a value that is not a paceline window')
end
if not v or v < 0 or v >= 2 * F or (v > 0 and (v % F < C or e < 0)) then
  return not_window()
end

if not test then
  if not redis.REDIS_VERSION_NUM and redis.replicate_commands then
    redis.replicate_commands()
  end
  local t = redis.call('TIME')
  now_s, now_n = t[1] + 0, t[2] * 1000
end

-- civil_from_days: the year and month of the day `z` days after
-- 1970-01-01.
local function civil(z)
  z = z + 719468
  local era = floor(z / 146097)
  local doe = z - era * 146097
  local yoe = floor((doe - floor(doe / 1460) + floor(doe / 36524) - floor(doe / 146096)) / 365)
  local doy = doe - (365 * yoe + floor(yoe / 4) - floor(yoe / 100))
  local mp = floor((5 * doy + 2) / 153)
  local m = mp < 10 and mp + 3 or mp - 9
  local y = yoe + era * 400
  if m <= 2 then
    y = y + 1
  end
  return y, m
end

-- days_from_civil: the days from 1970-01-01 to the first of month m
-- (1..12) of year y.
local function days(y, m)
  if m <= 2 then
    y = y - 1
  end
  local era = floor(y / 400)
  local yoe = y - era * 400
  local doy = floor((153 * ((m + 9) % 12) + 2) / 5)
  return era * 146097 + yoe * 365 + floor(yoe / 4) - floor(yoe / 100) + doy - 719468
end

-- The index of the window holding second s (Params::index_at).
local function index_at(s)
  if kind == 'f' then
    return floor(s / width)
  end
  local day = floor((s + offset) / DAY)
  local n
  if kind == 'd' then
    n = day
  elseif kind == 'w' then
    n = floor((day + 3 - width) / 7)
  elseif kind == 'm' then
    local y, m = civil(day)
    n = y * 12 + m - 1
  else
    n = civil(day)
  end
  return n - first
end

-- When window i starts, Unix seconds (Params::start, before its clamp to
-- 0 and to the clock's end: the callers compare it, and the expiry is
-- far in the future either way).
local function start(i)
  if kind == 'f' then
    return i * width
  end
  local n, day = i + first, nil
  if kind == 'd' then
    day = n
  elseif kind == 'w' then
    day = 7 * n - 3 + width
  elseif kind == 'm' then
    local y = floor(n / 12)
    day = days(y, n - y * 12 + 1)
  else
    day = days(n, 1)
  end
  return day * DAY - offset
end

-- The state (si, sc), had: the window the key's expiry ends, checked
-- against r; absent (or ended by TIME, read after Redis's own check) is
-- the model's EMPTY, window 0 counting 0.
local si, sc, had = 0, 0, false
if v > 0 then
  local end_ms = e + 1
  if test then
    end_ms = end_ms - T0
  end
  if end_ms % 1000 ~= 0 then
    return not_window()
  end
  local end_s = end_ms / 1000
  if now_s < end_s then
    si = index_at(end_s - 1)
    sc = v % C
    if floor((v % F) / C) ~= si % R + 1 or start(si + 1) ~= end_s then
      return not_window()
    end
    had = true
  end
end

-- The window a take at now counts in, and its count (Params::current).
local at = index_at(now_s)
local ci, cc = si, sc
if si < at then
  ci, cc = at, 0
end

-- Stores (i, c): f while window i is ahead of now, expiring at its end.
local function store(i, c)
  local from = start(i)
  local f = now_s < from and F or 0
  local pxat = start(i + 1) * 1000 - 1
  if test then
    pxat = pxat + T0
  end
  redis.call('SET', key, f + (i % R + 1) * C + c, 'PXAT', pxat)
end

if op == 'take' then
  if cost == 0 then
    if had then
      return {6, si, sc, now_s, now_n, si, sc}
    end
    return {6, si, sc, now_s, now_n}
  end
  local i, c = ci, cc + cost
  if cc > quota - cost then
    i, c = ci + 1, cost
  end
  if i > last then
    return {4}
  end
  -- The wait to window i's start, if it is ahead: d seconds less now_n.
  local d = start(i) - now_s
  if d > 0 and argv[a + 1] ~= '' then
    local max_s, max_n = argv[a + 1] + 0, argv[a + 2] + 0
    -- wait > max, as (d - max_s) * 10^9 > now_n + max_n: exact while
    -- |d - max_s| <= 1, and its sign decides beyond.
    if (d - max_s) * 1000000000 > now_n + max_n then
      if now_n > 0 then
        return {0, d - 1, 1000000000 - now_n}
      end
      return {0, d, 0}
    end
  end
  store(i, c)
  if had then
    return {6, i, c, now_s, now_n, si, sc}
  end
  return {6, i, c, now_s, now_n}
end

if op == 'peek' then
  return {3, si, sc, now_s, now_n}
end

if op == 'give' then
  if not had or si ~= argv[a] + 0 or sc ~= argv[a + 1] + 0 then
    return {5, 0}
  end
  if argv[a + 2] == '' then
    redis.call('DEL', key)
  else
    store(argv[a + 2] + 0, argv[a + 3] + 0)
  end
  return {5, 1}
end

-- settle
local went_s, excess, refund, cap = argv[a] + 0, argv[a + 1] + 0, argv[a + 2] + 0, argv[a + 3] + 0
local i, c = si, sc
if excess > 0 then
  i, c = ci, cc + excess
  if c > cap then
    c = cap
  end
elseif refund > 0 and si == ci and index_at(went_s) == si then
  if refund > sc then
    refund = sc
  end
  c = sc - refund
end
if i ~= si or c ~= sc then
  store(i, c)
end
return {3, i, c, now_s, now_n}
