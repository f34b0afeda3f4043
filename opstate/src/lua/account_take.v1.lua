-- account_take v1 (Redis Cluster, after hold.lua): an account's cooldown and, when it is open and
-- ARGV[4] is '1', a capacity slot — admit.v3's per-account rule, alone on the account's slot.
-- KEYS[1] = {prefix}{a:ACCOUNT}:cd, KEYS[2] = {prefix}{a:ACCOUNT}:slots
-- ARGV[1] = slot id, ARGV[2] = max live slots, ARGV[3] = slot ttl ms, ARGV[4] = '1' to take
-- returns {1 taken / 0 not, cooldown ms left (0: open), cooldown cause}
local left = redis.call('PTTL', KEYS[1])
if left > 0 then
  return {0, left, redis.call('GET', KEYS[1]) or ''}
end
if ARGV[4] == '1' and slot_take(KEYS[2], ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), now_ms()) then
  return {1, 0, ''}
end
return {0, 0, ''}
