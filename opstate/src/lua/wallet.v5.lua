-- wallet v5: every wallet operation, one atomic script. (v5.1: 'load' remembers as confirmed the
-- charges the loaded balance already holds, ARGV[3..]: see the op.) (v5: KEYS[6], the organization's key
-- spend (see opstate's budget.rs): holds may carry their key's tag, 'extend' keeps it, 'spend' reads
-- keys' spend and 'spend_load' restores it after the store lost it.) (v4: a settlement never charges less than
-- zero; a mirror found below its open holds is marked 'unreconciled', reported by 'snapshot' and
-- cleared by 'load'.) (v2: confirmed charges moved from the
-- adjusted set, where they were never removed, to a sorted set pruned after ten minutes. v3: the
-- 'extend' operation moves an open hold's deadline, for calls that outlive it. v3.1: confirmed
-- charges are remembered two minutes instead of ten, since the settler marks each usage record
-- whose charge it confirmed and never confirms a marked one again.)
-- KEYS[1] = wallet hash {prefix}{org:N}:wallet  (fields: balance, reserved, pending,
--           unreconciled)
-- KEYS[2] = holds hash  {prefix}{org:N}:holds   (hold id -> "amount:deadline_ms")
-- KEYS[3] = applied adjustment references {prefix}{org:N}:adjusted (set); settled hold ids are
--           kept there as "charged:<hold>" until the ledger confirms them
-- KEYS[4] = hold descriptions {prefix}{org:N}:holdmeta (hold id -> JSON written by the gateway),
--           what the reconciler needs to settle a hold whose gateway died
-- KEYS[5] = confirmed charges {prefix}{org:N}:confirmed (sorted set: hold id -> confirmation
--           time in ms), remembered CONFIRMED_MS so a redelivered confirmation is recognised
-- KEYS[6] = key spend {prefix}{org:N}:spend (hash: K:d, K:ds, K:m, K:ms, K:h per key K)
-- Sent after hold.lua (Script::new of both).
-- ARGV[1] = operation; further ARGV per operation. Amounts are integer nano-USD (exact below 2^53).
local op = ARGV[1]
-- now_ms, num and s come from hold.lua, prepended (with the reserve and settle rules).
-- A confirmation can only come twice between the settler's confirmation and its mark on the usage
-- record (a redelivery comes after the 30 s claim timeout); two minutes is ample, and keeps the set
-- bounded by two minutes of traffic.
local CONFIRMED_MS = 120000

if op == 'spend_load' then
  -- After a loss, before the wallet is loaded (no hold can be taken meanwhile): ARGV[2] = day,
  -- ARGV[3] = month, then per key K, charged that day, charged that month. A key whose window is
  -- already stored keeps it.
  for i = 4, #ARGV, 3 do
    local K = ARGV[i]
    if redis.call('HEXISTS', KEYS[6], K .. ':d') == 0 then
      redis.call('HSET', KEYS[6], K .. ':d', ARGV[2], K .. ':ds', ARGV[i + 1])
    end
    if redis.call('HEXISTS', KEYS[6], K .. ':m') == 0 then
      redis.call('HSET', KEYS[6], K .. ':m', ARGV[3], K .. ':ms', ARGV[i + 2])
    end
  end
  return {1}
end

if op == 'load' then
  -- v5.1: ARGV[3..] = request ids the ledger balance ARGV[2] already holds but whose confirmation
  -- may still come (booked, not yet confirmed): remembered as confirmed (ten minutes), so that
  -- confirmation is a duplicate, not a second debit.
  local remembered = now_ms() + CONFIRMED_MS * 4
  for i = 3, #ARGV do redis.call('ZADD', KEYS[5], remembered, ARGV[i]) end
  redis.call('HSET', KEYS[1], 'balance', ARGV[2])
  -- The ledger balance includes every confirmed charge; charges still pending are forgotten with
  -- the old incarnation and re-applied by confirm (see below).
  redis.call('HSET', KEYS[1], 'pending', '0')
  redis.call('HDEL', KEYS[1], 'unreconciled')
  local members = redis.call('SMEMBERS', KEYS[3])
  for i = 1, #members do
    local kind = string.sub(members[i], 1, 8)
    -- 'confirmed:' members were written by wallet v1; v2 keeps them in KEYS[5].
    if kind == 'charged:' or kind == 'confirme' then redis.call('SREM', KEYS[3], members[i]) end
  end
  if redis.call('HEXISTS', KEYS[1], 'reserved') == 0 then
    -- Recompute from open holds (a partial loss may have kept them).
    local total = 0
    local holds = redis.call('HVALS', KEYS[2])
    for i = 1, #holds do
      total = total + tonumber(string.match(holds[i], '^(%-?%d+)'))
    end
    redis.call('HSET', KEYS[1], 'reserved', s(total))
  end
  return {1}
end

if redis.call('EXISTS', KEYS[1]) == 0 then
  if op == 'expired' then return {} end
  return {-1}
end
local balance = num(redis.call('HGET', KEYS[1], 'balance'))
local reserved = num(redis.call('HGET', KEYS[1], 'reserved'))
local pending = num(redis.call('HGET', KEYS[1], 'pending'))

if op == 'adjust' then
  local delta = tonumber(ARGV[2])
  if redis.call('SISMEMBER', KEYS[3], ARGV[3]) == 1 then return {2} end
  if delta < 0 and balance + delta - reserved < 0 then return {0, s(balance - reserved)} end
  redis.call('SADD', KEYS[3], ARGV[3])
  redis.call('HSET', KEYS[1], 'balance', s(balance + delta))
  return {1, s(balance + delta)}
elseif op == 'reserve' then
  return hold_reserve(KEYS, ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4]), ARGV[5], now_ms(),
    ARGV[6])
elseif op == 'extend' then
  -- ARGV[2] = hold id, ARGV[3] = ttl ms from now. The amount and the description stay.
  local hold = redis.call('HGET', KEYS[2], ARGV[2])
  if not hold then return {0} end
  local amount, tag = string.match(hold, '^(%-?%d+):%d+(.*)$')
  redis.call('HSET', KEYS[2], ARGV[2], amount .. ':' .. s(now_ms() + tonumber(ARGV[3])) .. tag)
  return {1}
elseif op == 'settle' or op == 'release' then
  return hold_close(KEYS, ARGV[2], tonumber(ARGV[3] or '0'), op == 'release')
elseif op == 'confirm' then
  -- The ledger now holds a charge of ARGV[2] for hold ARGV[3]. If this incarnation charged it,
  -- it stops being pending; otherwise (the mirror was reloaded before the ledger had it) the mirror
  -- takes the debit now.
  local amount = tonumber(ARGV[2])
  local now = now_ms()
  redis.call('ZREMRANGEBYSCORE', KEYS[5], '-inf', '(' .. s(now - CONFIRMED_MS))
  if redis.call('SREM', KEYS[3], 'charged:' .. ARGV[3]) == 1 then
    redis.call('HSET', KEYS[1], 'pending', s(pending - amount))
    redis.call('ZADD', KEYS[5], now, ARGV[3])
    return {1}
  end
  if redis.call('ZSCORE', KEYS[5], ARGV[3]) then return {2} end
  if redis.call('SISMEMBER', KEYS[3], 'confirmed:' .. ARGV[3]) == 1 then return {2} end
  redis.call('ZADD', KEYS[5], now, ARGV[3])
  redis.call('HSET', KEYS[1], 'balance', s(balance - amount))
  return {3}
elseif op == 'spend' then
  -- ARGV[2..] = key ids: {1, ms until the day ends, ms until the month ends, then per key: charged
  -- today, this month, held}
  local now = now_ms()
  local day, month, day_end, month_end = windows(now)
  local out = {1, s(day_end - now), s(month_end - now)}
  for i = 2, #ARGV do
    local ds, ms, held = spend_now(KEYS[6], ARGV[i], day, month)
    out[#out + 1] = s(ds)
    out[#out + 1] = s(ms)
    out[#out + 1] = s(held)
  end
  return out
elseif op == 'snapshot' then
  local unreconciled = 0
  if redis.call('HEXISTS', KEYS[1], 'unreconciled') == 1 or balance < reserved then unreconciled = 1 end
  return {1, s(balance), s(reserved), s(pending), unreconciled}
elseif op == 'expired' then
  local now = now_ms()
  local out = {}
  local all = redis.call('HGETALL', KEYS[2])
  for i = 1, #all, 2 do
    local amount, deadline = string.match(all[i + 1], '^(%-?%d+):(%d+)')
    if tonumber(deadline) <= now then
      table.insert(out, all[i])
      table.insert(out, amount)
      table.insert(out, redis.call('HGET', KEYS[4], all[i]) or '')
    end
  end
  return out
end
return redis.error_reply('ERR unknown wallet operation')
