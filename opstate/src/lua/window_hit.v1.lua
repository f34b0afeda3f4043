-- window_hit v1: count one event in the current fixed window, on the Redis server's clock so every
-- instance agrees on window boundaries.
-- KEYS[1] = counter hash (fields w = window index, c = count); ARGV[1] = window length in ms
-- returns {count in this window including this event, ms until the window ends}
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local window = tonumber(ARGV[1])
if window == nil or window <= 0 then return redis.error_reply('ERR bad window') end
local idx = math.floor(now_ms / window)
local cur = tonumber(redis.call('HGET', KEYS[1], 'w') or '-1')
if cur ~= idx then
  redis.call('HSET', KEYS[1], 'w', idx, 'c', 0)
end
local c = redis.call('HINCRBY', KEYS[1], 'c', 1)
redis.call('PEXPIRE', KEYS[1], window * 2)
return {c, (idx + 1) * window - now_ms}
