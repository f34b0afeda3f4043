-- admit v4 (v4: the wallet's sixth key, its key spend, and the hold's key: its budget checked in
-- the hold's step, ARGV[#ARGV - 1]; limited 4 = the budget) (v3: the caller's key is checked against the key directory first, so a key revoked
-- since a proxy cached its record is refused at once): a call's admission in one step (after
-- hold.lua): the cooldowns of its candidate
-- accounts, its limits (gates: calls in flight under a name; one per-minute counter), a capacity
-- slot on the first open account with room, and the wallet hold. Either everything is taken
-- (gate slots, the minute's count, the account slot, the hold) or nothing.
-- KEYS[1..6] = the organization's wallet keys (see wallet.v5); KEYS[7] = {wallets}:holding;
-- KEYS[8] = the per-minute counter (hash: w = minute index, c = count; untouched without a
-- limit); KEYS[8 + j] = gate j's slots (j = 1..g);
-- KEYS[9 + g + 2(i-1)] = cooldown key of account i, KEYS[10 + g + 2(i-1)] = its slots (i = 1..n);
-- KEYS[#KEYS - 1] = the key directory (hash: key hash -> record), KEYS[#KEYS] = its "loaded"
-- mark (a directory the store lost is not complete: its misses prove nothing)
-- ARGV[1] = slot id, ARGV[2] = slot ttl ms, ARGV[3] = '1' to hold ('0': no hold), ARGV[4] = org,
-- ARGV[5] = hold id, ARGV[6] = amount, ARGV[7] = hold ttl ms, ARGV[8] = hold description,
-- ARGV[9] = g, ARGV[10] = per-minute limit (0: none), ARGV[10 + j] = gate j's max,
-- ARGV[10 + g + i] = account i's max live slots, ARGV[#ARGV - 1] = the hold's key spend ask
-- (see hold_reserve), ARGV[#ARGV] = the caller's key hash ('': not checked)
-- returns {taken (1-based; 0: none), hold code (see hold_reserve; 9: not asked), available,
--          limited (0 no, 1 a gate, 2 the minute, 3 the key is revoked: nothing is read or taken,
--          every cooldown reads 0; 4 the key's budget: nothing is taken),
--          its detail (the gate, 1-based; or ms until the minute or the budget's period ends;
--          with 4, the budget's remaining amount follows as the hold code's 'available'), then
--          per account:
--          cooldown ms left (0: open), cooldown cause}
local W = {KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]}
local g = tonumber(ARGV[9])
local per_minute = tonumber(ARGV[10])
local first = 9 + g
local n = (#KEYS - 10 - g) / 2
local slot_id = ARGV[1]
local key_hash = ARGV[#ARGV]
if key_hash ~= '' and redis.call('EXISTS', KEYS[#KEYS]) == 1
    and redis.call('HEXISTS', KEYS[#KEYS - 1], key_hash) == 0 then
  local refused = {0, 9, '0', 3, 0}
  for i = 1, n do
    refused[#refused + 1] = 0
    refused[#refused + 1] = ''
  end
  return refused
end
local now = now_ms()
local out = {0, 9, '0', 0, 0}
local open = {}
for i = 1, n do
  local cd = KEYS[first + 2 * (i - 1)]
  local left = redis.call('PTTL', cd)
  if left > 0 then
    out[#out + 1] = left
    out[#out + 1] = redis.call('GET', cd) or ''
  else
    out[#out + 1] = 0
    out[#out + 1] = ''
    open[#open + 1] = i
  end
end
for j = 1, g do
  local zkey = KEYS[8 + j]
  redis.call('ZREMRANGEBYSCORE', zkey, '-inf', now)
  if not redis.call('ZSCORE', zkey, slot_id) and redis.call('ZCARD', zkey) >= tonumber(ARGV[10 + j]) then
    out[4], out[5] = 1, j
    return out
  end
end
local minute = math.floor(now / 60000)
if per_minute > 0 then
  local count = 0
  if tonumber(redis.call('HGET', KEYS[8], 'w') or '-1') == minute then
    count = tonumber(redis.call('HGET', KEYS[8], 'c') or '0')
  end
  if count >= per_minute then
    out[4], out[5] = 2, (minute + 1) * 60000 - now
    return out
  end
end
local slot_ttl = tonumber(ARGV[2])
for _, i in ipairs(open) do
  local zkey = KEYS[first + 1 + 2 * (i - 1)]
  if slot_take(zkey, slot_id, tonumber(ARGV[10 + g + i]), slot_ttl, now) then
    out[1] = i
    if ARGV[3] == '1' then
      redis.call('SADD', KEYS[7], ARGV[4])
      local r = hold_reserve(W, ARGV[5], tonumber(ARGV[6]), tonumber(ARGV[7]), ARGV[8], now,
        ARGV[#ARGV - 1])
      out[2] = r[1]
      out[3] = r[2] or '0'
      if r[1] == 3 then
        out[2], out[3], out[4], out[5] = 9, r[3], 4, r[2]
      end
      if r[1] ~= 1 and r[1] ~= 2 then
        redis.call('ZREM', zkey, slot_id)
        out[1] = 0
      end
    end
    break
  end
end
if out[1] ~= 0 then
  for j = 1, g do
    local zkey = KEYS[8 + j]
    redis.call('ZADD', zkey, s(now + slot_ttl), slot_id)
    redis.call('PEXPIRE', zkey, slot_ttl + 1000)
  end
  if per_minute > 0 then
    if tonumber(redis.call('HGET', KEYS[8], 'w') or '-1') == minute then
      redis.call('HINCRBY', KEYS[8], 'c', 1)
    else
      redis.call('HSET', KEYS[8], 'w', minute, 'c', 1)
    end
    redis.call('PEXPIRE', KEYS[8], 120000)
  end
end
return out
