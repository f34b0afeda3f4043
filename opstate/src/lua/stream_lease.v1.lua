-- A usage stream's lease (issue 48, `leases.rs`): KEYS[1] the lease; ARGV[1] the settler;
-- ARGV[2] the TTL in ms; ARGV[3] 'take' (taken when free, renewed when the settler holds it:
-- 1 when it holds it now, else 0) or 'give' (deleted only when the settler holds it).
local v = redis.call('GET', KEYS[1])
if ARGV[3] == 'give' then
  if v == ARGV[1] then
    redis.call('DEL', KEYS[1])
    return 1
  end
  return 0
end
if v == false or v == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return 1
end
return 0
