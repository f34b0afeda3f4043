-- slot_acquire v1: take a capacity slot if the account has room, dropping expired slots first.
-- KEYS[1] = {prefix}{slots:ACCOUNT} (sorted set: slot id -> expiry ms)
-- ARGV[1] = slot id, ARGV[2] = max live slots, ARGV[3] = ttl ms
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZSCORE', KEYS[1], ARGV[1]) then return 1 end
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[2]) then return 0 end
redis.call('ZADD', KEYS[1], string.format('%d', now + tonumber(ARGV[3])), ARGV[1])
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[3]) + 1000)
return 1
