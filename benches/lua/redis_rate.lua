-- go-redis/redis_rate's GCRA (its `allowN` script, lua.go; itself from
-- rwz/redis-gcra, (c) 2017 Pavel Pravosud, MIT), operation for operation,
-- for measuring beside paceline's step. Times are float seconds since
-- 2017-01-01 at TIME's microsecond resolution.
--
-- KEYS[1] the key; ARGV: burst, rate, period (s), cost.
-- Reply: {allowed, remaining, retry_after, reset_after}.
redis.replicate_commands()

local rate_limit_key = KEYS[1]
local burst = ARGV[1]
local rate = ARGV[2]
local period = ARGV[3]
local cost = tonumber(ARGV[4])

local emission_interval = period / rate
local increment = emission_interval * cost
local burst_offset = emission_interval * burst

local jan_1_2017 = 1483228800
local now = redis.call("TIME")
now = (now[1] - jan_1_2017) + (now[2] / 1000000)

local tat = redis.call("GET", rate_limit_key)
if not tat then
  tat = now
else
  tat = tonumber(tat)
end
tat = math.max(tat, now)

local new_tat = tat + increment
local allow_at = new_tat - burst_offset
local diff = now - allow_at
local remaining = math.floor(diff / emission_interval + 0.5)

if remaining >= 0 then
  local reset_after = new_tat - now
  redis.call("SET", rate_limit_key, new_tat, "EX", math.ceil(reset_after))
  local retry_after = -1
  return {cost, remaining, tostring(retry_after), tostring(reset_after)}
end

remaining = 0
local reset_after = tat - now
local retry_after = diff * -1
return {0, remaining, tostring(retry_after), tostring(reset_after)}
