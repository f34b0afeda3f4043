-- hold_take v1 (Redis Cluster, after hold.lua): admit.v3's hold, alone on the organization's
-- money slot: the organization entered in its slot's work list first, then the hold.
-- KEYS[1..5] = the organization's wallet keys (see wallet.v4); KEYS[6] = the money slot's work
-- list; ARGV[1] = org, ARGV[2] = hold id, ARGV[3] = amount, ARGV[4] = hold ttl ms,
-- ARGV[5] = hold description
-- returns {hold code (see hold_reserve), available}
redis.call('SADD', KEYS[6], ARGV[1])
local r = hold_reserve({KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]}, ARGV[2], tonumber(ARGV[3]),
  tonumber(ARGV[4]), ARGV[5], now_ms())
return {tostring(r[1]), r[2] or '0'}
