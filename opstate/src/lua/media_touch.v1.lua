-- Moves the TTL of a media entry only while it is still the claim it was (issue 46, batch lines):
-- KEYS[1] the entry; ARGV[1] its content type followed by NUL; ARGV[2] the TTL in ms.
-- 1 when moved, 0 when the entry is gone or was replaced (an answer, a claim given back).
local v = redis.call('GET', KEYS[1])
if v and string.sub(v, 1, #ARGV[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
