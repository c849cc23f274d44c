-- paceline's window step (src/model/window.rs), run atomically inside
-- Redis: a quota of q permits per window of the server's clock.
--
-- KEYS[1]  a hash: field `i` the index of the window last counted in, `c`
--          what it counted there, each a decimal integer; absent means
--          nothing counted (the model's EMPTY: window 0, count 0). Any
--          other value is an error, never a fresh key.
--
-- ARGV: the operation, the window, then the operation's arguments.
--
--   window: kind, width, offset, first, last, quota
--       kind "f" (fixed: width its seconds), "d" day, "w" week (width the
--       first weekday, Monday 0 ... Sunday 6), "m" month, "y" year; offset
--       seconds east of UTC (0 for fixed); first the calendar's number of
--       the window holding the epoch (window::Params; 0 for fixed); last
--       the index of the window holding the clock's end (u64::MAX ns), past
--       which nothing is granted; quota q (at most 2^53 - 1, checked by the
--       client: Lua numbers are doubles).
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
--       2^53); a refund comes off the count, never below 0, only while the
--       window holding went_s (the booking's permit's second) is the
--       stored one and the current one.
--   "test", now_s, now_n, then one of the above with its arguments
--       tests only: decides at now (Unix time s, ns) instead of TIME and
--       stores without expiry.
--
-- Replies, all integers (a time as s, ns):
--   {1, i, c, now_s, now_n [, prev_i, prev_c]}  "take" granted: counted in
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
-- double: times in whole seconds (every window starts on a whole second;
-- Unix seconds stay below 2^35), days and window numbers (below 2^30),
-- counts (the quota's bound). Each division is of such integers, with
-- a non-negative divisor, so math.floor(a / b) is the exact floor: the
-- quotient is off an integer by at least 1 / b, which is more than half its
-- ulp while |a| < 2^52. The calendar is Howard Hinnant's civil-date
-- arithmetic, as src/model/calendar.rs writes it.
--
-- Expiry. A key expires MARGIN_MS after the end of the window it holds:
-- after that end it counts nothing anyway, and the margin keeps a window
-- from being reopened by a server clock stepped back by less than it.
--
-- Why a script of its own: the pacing step (step.lua) is written for the
-- fewest instructions on its hot path and keeps a decimal string; a window
-- keeps a hash of two integers and a calendar. A branch would make every
-- pacing call parse past the other, and neither reads the other's keys.

local MARGIN_MS = 10000
local DAY = 86400
local floor = math.floor
local argv = ARGV
local key = KEYS[1]

local op, a = argv[1], 2
local test = op == 'test'
if test then
  op, a = argv[4], 5
end
if op ~= 'take' and op ~= 'peek' and op ~= 'give' and op ~= 'settle' then
  return redis.error_reply('paceline: unknown operation ' .. tostring(op))
end

local kind, width, offset = argv[a], argv[a + 1] + 0, argv[a + 2] + 0
local first, last, quota = argv[a + 3] + 0, argv[a + 4] + 0, argv[a + 5] + 0
a = a + 6

-- The clock: the test's, or TIME (Unix seconds and microseconds).
local now_s, now_n
if test then
  now_s, now_n = argv[2] + 0, argv[3] + 0
else
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

-- The state: (i, c), or absent.
local got = redis.call('HMGET', key, 'i', 'c')
local si, sc, had = 0, 0, false
if got[1] or got[2] then
  si, sc = tonumber(got[1]), tonumber(got[2])
  if not si or not sc or si ~= floor(si) or sc ~= floor(sc) or si < 0 or sc < 0 then
    return redis.error_reply('paceline: key ' .. key .. ' holds a hash that is not a paceline window')
  end
  had = true
elseif redis.call('EXISTS', key) == 1 then
  return redis.error_reply('paceline: key ' .. key .. ' holds a hash that is not a paceline window')
end

-- The window a take at now counts in, and its count (Params::current).
local at = index_at(now_s)
local ci, cc = si, sc
if si < at then
  ci, cc = at, 0
end

-- Stores (i, c), expiring MARGIN_MS after window i's end (not in tests):
-- a key that already held window i already expires then.
local function store(i, c)
  redis.call('HSET', key, 'i', i, 'c', c)
  if not test and (i ~= si or not had) then
    redis.call('PEXPIREAT', key, start(i + 1) * 1000 + MARGIN_MS)
  end
end

if op == 'take' then
  local cost = argv[a] + 0
  if cost == 0 then
    if had then
      return {1, si, sc, now_s, now_n, si, sc}
    end
    return {1, si, sc, now_s, now_n}
  end
  if cost > quota then
    return {2}
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
    return {1, i, c, now_s, now_n, si, sc}
  end
  return {1, i, c, now_s, now_n}
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
