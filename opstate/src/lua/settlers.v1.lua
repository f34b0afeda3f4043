-- The live settlers (issue 48, `leases.rs`): KEYS[1] the sorted set (settler id -> the time its
-- heartbeat lapses, ms on this server's clock); ARGV[1] the settler; ARGV[2] its TTL in ms;
-- ARGV[3] 'beat' (alive for the TTL more: returns how many are alive) or 'leave' (returns 0).
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if ARGV[3] == 'leave' then
  redis.call('ZREM', KEYS[1], ARGV[1])
  return 0
end
local ttl = tonumber(ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
redis.call('ZADD', KEYS[1], now + ttl, ARGV[1])
-- A deployment that stopped leaves nothing behind.
redis.call('PEXPIRE', KEYS[1], ttl * 4)
return redis.call('ZCARD', KEYS[1])
