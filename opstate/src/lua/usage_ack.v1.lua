-- usage_ack v1: acknowledge and delete usage stream entries in one step, so an entry is never
-- acknowledged but left behind (or deleted while still pending for its consumer group).
-- KEYS[1] = usage stream; ARGV[1] = consumer group; ARGV[2..] = entry ids
-- returns the number of entries deleted
local n = 0
for i = 2, #ARGV do
  redis.call('XACK', KEYS[1], ARGV[1], ARGV[i])
  n = n + redis.call('XDEL', KEYS[1], ARGV[i])
end
return n
