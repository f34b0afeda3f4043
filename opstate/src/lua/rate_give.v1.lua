-- rate_give v1 (Redis Cluster): give back a count rate_take made when the call was refused by
-- another of its limits, if its minute is still the counter's.
-- KEYS[1] = the counter; ARGV[1] = the minute rate_take counted in
if tonumber(redis.call('HGET', KEYS[1], 'w') or '-1') == tonumber(ARGV[1]) then
  if tonumber(redis.call('HGET', KEYS[1], 'c') or '0') > 0 then
    redis.call('HINCRBY', KEYS[1], 'c', -1)
  end
end
return 1
