-- hold_take v2 (Redis Cluster, after hold.lua; v2: the wallet's sixth key, its key spend, and the
-- hold's key spend ask, ARGV[6]): admit.v4's hold, alone on the organization's
-- money slot: the organization entered in its slot's work list first, then the hold.
-- KEYS[1..6] = the organization's wallet keys (see wallet.v5); KEYS[7] = the money slot's work
-- list; ARGV[1] = org, ARGV[2] = hold id, ARGV[3] = amount, ARGV[4] = hold ttl ms,
-- ARGV[5] = hold description, ARGV[6] = the key spend ask (see hold_reserve)
-- returns {hold code (see hold_reserve), available (with code 3: ms until the period ends),
--          the budget's remaining amount (code 3 only)}
redis.call('SADD', KEYS[7], ARGV[1])
local r = hold_reserve({KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]}, ARGV[2],
  tonumber(ARGV[3]), tonumber(ARGV[4]), ARGV[5], now_ms(), ARGV[6])
return {tostring(r[1]), r[2] or '0', r[3] or '0'}
