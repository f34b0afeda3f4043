-- rate_take v1 (Redis Cluster, after hold.lua): count a call in its minute unless the limit is
-- reached — admit.v3's per-minute rule, alone on the counter's slot.
-- KEYS[1] = the counter (hash: w = minute index, c = count); ARGV[1] = the limit
-- returns {1, the minute counted in} or {0, ms until the minute ends}
local now = now_ms()
local minute = math.floor(now / 60000)
local count = 0
if tonumber(redis.call('HGET', KEYS[1], 'w') or '-1') == minute then
  count = tonumber(redis.call('HGET', KEYS[1], 'c') or '0')
end
if count >= tonumber(ARGV[1]) then
  return {0, (minute + 1) * 60000 - now}
end
redis.call('HSET', KEYS[1], 'w', minute, 'c', count + 1)
redis.call('PEXPIRE', KEYS[1], 120000)
return {1, minute}
