-- cooldown v1: cool an account, never shortening an existing cooldown.
-- KEYS[1] = {prefix}{cd:ACCOUNT}; ARGV[1] = duration in ms
local ttl = redis.call('PTTL', KEYS[1])
if ttl < tonumber(ARGV[1]) then
  redis.call('SET', KEYS[1], '1', 'PX', ARGV[1])
end
return 1
