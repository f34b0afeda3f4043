-- finish v5 (v5: ARGV[5] = 'resolve', the reconciler's resolution of an expired hold: the event
-- is appended only when this settlement charged the hold, so a settlement and its event are one
-- step that a failover keeps or loses whole) (v4: the wallet's sixth key, its key spend, which the settlement counts in) (v3: the settlement reports a mirror found below its holds, see hold.lua): a call's end in one step (after hold.lua): its capacity slot (and its slots in the
-- gates of its limits) given back, its hold settled, and its usage event appended with what the
-- settlement charged.
-- KEYS[1..6] = the organization's wallet keys (see wallet.v5); KEYS[7] = the account's slots;
-- KEYS[8] = the usage stream; KEYS[9..] = the gates the call holds a slot in
-- ARGV[1] = slot id ('' none), ARGV[2] = hold id ('' none), ARGV[3] = cost (nano-USD),
-- ARGV[4] = the usage event's JSON ('' none), ARGV[5] = 'resolve' (optional; see v5)
-- returns {hold code (1 settled, 0 unknown, -1 no mirror, 9 no hold), charged, excess, below}
-- The stream entry is {e = JSON, c = charged, x = excess} (c and x only with a hold): the event's
-- own charged/excess fields are overridden by c and x when read.
local W = {KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]}
if ARGV[1] ~= '' then
  redis.call('ZREM', KEYS[7], ARGV[1])
  for k = 9, #KEYS do redis.call('ZREM', KEYS[k], ARGV[1]) end
end
local cost = tonumber(ARGV[3]) or 0
local code, charged, excess, below = 9, '0', '0', 0
if ARGV[2] ~= '' then
  local r = hold_close(W, ARGV[2], cost, false)
  code = r[1]
  if code == 1 then
    charged, excess, below = r[2], r[3], r[4]
  else
    -- The hold is gone (resolved by the reconciler, or the store lost it): nothing was charged
    -- here; the settler books the cost as excess.
    charged, excess = '0', s(cost)
  end
end
if ARGV[4] ~= '' and (ARGV[5] ~= 'resolve' or code == 1) then
  if code == 9 then
    redis.call('XADD', KEYS[8], '*', 'e', ARGV[4])
  else
    redis.call('XADD', KEYS[8], '*', 'e', ARGV[4], 'c', charged, 'x', excess)
  end
end
return {code, charged, excess, below}
