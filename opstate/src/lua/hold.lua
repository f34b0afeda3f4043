-- hold: the wallet rules shared by wallet.v4, admit.v3 and finish.v3 (prepended to each script).
-- W = {wallet, holds, adjusted, holdmeta, confirmed} keys of one organization (see wallet.v4).
-- Amounts are integer nano-USD (exact below 2^53).
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function num(v) return tonumber(v or '0') or 0 end
-- Numbers are written with %d: Lua's default formatting would switch to exponents above 1e14.
local function s(x) return string.format('%d', x) end

-- Reserves amount under hold_id until ttl_ms from now: {1, available after} held; {2} already
-- held; {0, available} not enough; {-1} no mirror.
local function hold_reserve(W, hold_id, amount, ttl_ms, meta, now)
  if redis.call('EXISTS', W[1]) == 0 then return {-1} end
  if amount == nil or amount < 0 then return redis.error_reply('ERR bad amount') end
  local balance = num(redis.call('HGET', W[1], 'balance'))
  local reserved = num(redis.call('HGET', W[1], 'reserved'))
  if redis.call('HEXISTS', W[2], hold_id) == 1 then return {2} end
  local available = balance - reserved
  if amount > available then return {0, s(available)} end
  redis.call('HSET', W[2], hold_id, s(amount) .. ':' .. s(now + ttl_ms))
  if meta and meta ~= '' then redis.call('HSET', W[4], hold_id, meta) end
  redis.call('HSET', W[1], 'reserved', s(reserved + amount))
  return {1, s(available - amount)}
end

-- Closes an open hold. release: no charge, {1}. Otherwise charges actual, at most what the wallet
-- can pay (balance minus the other holds) and never less than zero: {1, charged, excess, below},
-- below = 1 when the mirror was below its other holds (it pays nothing, and is marked
-- 'unreconciled' until the next load). {0} no such hold; {-1} no mirror.
local function hold_close(W, hold_id, actual, release)
  if redis.call('EXISTS', W[1]) == 0 then return {-1} end
  local hold = redis.call('HGET', W[2], hold_id)
  if not hold then return {0} end
  local balance = num(redis.call('HGET', W[1], 'balance'))
  local reserved = num(redis.call('HGET', W[1], 'reserved'))
  local pending = num(redis.call('HGET', W[1], 'pending'))
  local amount = tonumber(string.match(hold, '^(%-?%d+)'))
  redis.call('HDEL', W[2], hold_id)
  redis.call('HDEL', W[4], hold_id)
  reserved = reserved - amount
  redis.call('HSET', W[1], 'reserved', s(reserved))
  if release then return {1} end
  if actual < 0 then actual = 0 end
  local payable = balance - reserved
  local below = 0
  if payable < 0 then
    -- Loaded below its holds: a settlement never credits; the mirror waits for a reload.
    payable = 0
    below = 1
    redis.call('HSET', W[1], 'unreconciled', '1')
  end
  local charged = actual
  if charged > payable then charged = payable end
  redis.call('HSET', W[1], 'balance', s(balance - charged))
  if charged > 0 then
    redis.call('HSET', W[1], 'pending', s(pending + charged))
    redis.call('SADD', W[3], 'charged:' .. hold_id)
  end
  return {1, s(charged), s(actual - charged), below}
end

-- Takes capacity slot slot_id in the sorted set zkey (slot id -> expiry ms) if fewer than max
-- live slots are taken, dropping expired ones first. true: taken (or already held).
local function slot_take(zkey, slot_id, max, ttl_ms, now)
  redis.call('ZREMRANGEBYSCORE', zkey, '-inf', now)
  if redis.call('ZSCORE', zkey, slot_id) then return true end
  if redis.call('ZCARD', zkey) >= max then return false end
  redis.call('ZADD', zkey, s(now + ttl_ms), slot_id)
  redis.call('PEXPIRE', zkey, ttl_ms + 1000)
  return true
end
