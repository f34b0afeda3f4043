-- admit v1: a call's admission in one step (after hold.lua): the cooldowns of its candidate
-- accounts, a capacity slot on the first open one with room, and the wallet hold. If the hold is
-- refused, the slot is given back: either both are taken or neither.
-- KEYS[1..5] = the organization's wallet keys (see wallet.v3); KEYS[6] = {wallets}:holding;
-- KEYS[7 + 2(i-1)] = cooldown key of account i, KEYS[8 + 2(i-1)] = its slots (i = 1..n)
-- ARGV[1] = slot id, ARGV[2] = slot ttl ms, ARGV[3] = '1' to hold ('0': no hold), ARGV[4] = org,
-- ARGV[5] = hold id, ARGV[6] = amount, ARGV[7] = hold ttl ms, ARGV[8] = hold description,
-- ARGV[9 + (i-1)] = account i's max live slots
-- returns {taken (1-based; 0: none), hold code (see hold_reserve; 9: not asked), available,
--          then per account: cooldown ms left (0: open), cooldown cause}
local W = {KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]}
local n = (#KEYS - 6) / 2
local now = now_ms()
local out = {0, 9, '0'}
local open = {}
for i = 1, n do
  local cd = KEYS[7 + 2 * (i - 1)]
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
local slot_ttl = tonumber(ARGV[2])
for _, i in ipairs(open) do
  local zkey = KEYS[8 + 2 * (i - 1)]
  if slot_take(zkey, ARGV[1], tonumber(ARGV[9 + (i - 1)]), slot_ttl, now) then
    out[1] = i
    if ARGV[3] == '1' then
      redis.call('SADD', KEYS[6], ARGV[4])
      local r = hold_reserve(W, ARGV[5], tonumber(ARGV[6]), tonumber(ARGV[7]), ARGV[8], now)
      out[2] = r[1]
      out[3] = r[2] or '0'
      if r[1] ~= 1 and r[1] ~= 2 then
        redis.call('ZREM', zkey, ARGV[1])
        out[1] = 0
      end
    end
    break
  end
end
return out
