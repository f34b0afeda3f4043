-- cooldown v2: cool an account with its cause, never shortening an existing cooldown (a longer
-- existing one keeps its own cause).
-- KEYS[1] = {prefix}{cd:ACCOUNT}; ARGV[1] = duration in ms; ARGV[2] = cause (limit | failure)
local ttl = redis.call('PTTL', KEYS[1])
if ttl < tonumber(ARGV[1]) then
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[1])
end
return 1
