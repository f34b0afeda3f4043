-- slot_acquire v1: take a capacity slot if the account has room, dropping expired slots first
-- (slot_take in hold.lua, prepended).
-- KEYS[1] = {prefix}{slots:ACCOUNT} (sorted set: slot id -> expiry ms)
-- ARGV[1] = slot id, ARGV[2] = max live slots, ARGV[3] = ttl ms
if slot_take(KEYS[1], ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), now_ms()) then return 1 end
return 0
