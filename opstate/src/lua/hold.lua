-- hold: the wallet rules shared by wallet.v5, admit.v4, finish.v5 and hold_take.v2 (prepended to
-- each script). W = {wallet, holds, adjusted, holdmeta, confirmed, spend} keys of one organization
-- (see wallet.v5). The key spend rules are opstate's budget.rs, line by line.
-- Amounts are integer nano-USD (exact below 2^53).
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function num(v) return tonumber(v or '0') or 0 end
-- Numbers are written with %d: Lua's default formatting would switch to exponents above 1e14.
local function s(x) return string.format('%d', x) end


-- The UTC budget windows at ms: day index, month index (year * 12 + month - 1), and when each
-- ends (ms). H. Hinnant's civil calendar arithmetic, as in budget.rs.
local DAY_MS = 86400000
local function days_from_civil(y, m)
  if m <= 2 then y = y - 1 end
  local era = math.floor(y / 400)
  local yoe = y - era * 400
  local mp = (m + 9) % 12
  local doy = math.floor((153 * mp + 2) / 5)
  local doe = yoe * 365 + math.floor(yoe / 4) - math.floor(yoe / 100) + doy
  return era * 146097 + doe - 719468
end
local function windows(ms)
  local day = math.floor(ms / DAY_MS)
  local z = day + 719468
  local era = math.floor(z / 146097)
  local doe = z - era * 146097
  local yoe = math.floor((doe - math.floor(doe / 1460) + math.floor(doe / 36524)
    - math.floor(doe / 146096)) / 365)
  local doy = doe - (365 * yoe + math.floor(yoe / 4) - math.floor(yoe / 100))
  local mp = math.floor((5 * doy + 2) / 153)
  local m = mp < 10 and mp + 3 or mp - 9
  local y = yoe + era * 400
  if m <= 2 then y = y + 1 end
  local month = y * 12 + m - 1
  local nxt = month + 1
  local month_end = days_from_civil(math.floor(nxt / 12), nxt % 12 + 1) * DAY_MS
  return day, month, (day + 1) * DAY_MS, month_end
end

-- Key K's spend in spend hash H at windows (day, month): charged that day, that month, held.
local function spend_now(H, K, day, month)
  local f = redis.call('HMGET', H, K .. ':d', K .. ':ds', K .. ':m', K .. ':ms', K .. ':h')
  local ds, ms = 0, 0
  if tonumber(f[1]) == day then ds = num(f[2]) end
  if tonumber(f[3]) == month then ms = num(f[4]) end
  return ds, ms, num(f[5])
end

-- Recomputes K's held amount from the organization's open holds (heals any drift).
local function spend_reheld(W, K)
  local total = 0
  local holds = redis.call('HVALS', W[2])
  for i = 1, #holds do
    local amount, k = string.match(holds[i], '^(%-?%d+):%d+:(%d+):')
    if k == K then total = total + tonumber(amount) end
  end
  redis.call('HSET', W[6], K .. ':h', s(total))
  return total
end

-- Counts charged for K in the window idx of field F (F:ds or F:ms kept with its index F:d/F:m):
-- added when idx is the window stored, started when the stored one is older or none, dropped when
-- the stored one is newer.
local function spend_count(H, K, f, idx, charged)
  local stored = tonumber(redis.call('HGET', H, K .. ':' .. f))
  if stored == idx then
    redis.call('HINCRBY', H, K .. ':' .. f .. 's', charged)
  elseif stored == nil or stored < idx then
    redis.call('HSET', H, K .. ':' .. f, s(idx), K .. ':' .. f .. 's', s(charged))
  end
end

-- Reserves amount under hold_id until ttl_ms from now: {1, available after} held; {2} already
-- held; {0, available} not enough; {-1} no mirror; {3, ms until the budget's period ends,
-- remaining budget} refused by the key's budget. spend: '' (no key), 'K' (the key's spend is
-- counted) or 'K:LIMIT:d|m' (and its budget checked).
local function hold_reserve(W, hold_id, amount, ttl_ms, meta, now, spend)
  if redis.call('EXISTS', W[1]) == 0 then return {-1} end
  if amount == nil or amount < 0 then return redis.error_reply('ERR bad amount') end
  local balance = num(redis.call('HGET', W[1], 'balance'))
  local reserved = num(redis.call('HGET', W[1], 'reserved'))
  if redis.call('HEXISTS', W[2], hold_id) == 1 then return {2} end
  local tag = ''
  local K
  if spend and spend ~= '' then
    local limit, period
    K, limit, period = string.match(spend, '^(%d+):?(%d*):?([dm]?)$')
    if not K then return redis.error_reply('ERR bad spend ask') end
    local day, month, day_end, month_end = windows(now)
    if limit ~= '' then
      limit = tonumber(limit)
      local ds, ms, held = spend_now(W[6], K, day, month)
      local spent, ends = ds, day_end
      if period == 'm' then spent, ends = ms, month_end end
      if spent + held + amount > limit then
        held = spend_reheld(W, K)
        if spent + held + amount > limit then
          local left = limit - spent - held
          if left < 0 then left = 0 end
          return {3, s(ends - now), s(left)}
        end
      end
    end
    tag = ':' .. K .. ':' .. s(day) .. ':' .. s(month)
  end
  local available = balance - reserved
  if amount > available then return {0, s(available)} end
  if K then redis.call('HINCRBY', W[6], K .. ':h', amount) end
  redis.call('HSET', W[2], hold_id, s(amount) .. ':' .. s(now + ttl_ms) .. tag)
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
  local K, hday, hmonth = string.match(hold, '^%-?%d+:%d+:(%d+):(%-?%d+):(%-?%d+)$')
  redis.call('HDEL', W[2], hold_id)
  redis.call('HDEL', W[4], hold_id)
  reserved = reserved - amount
  redis.call('HSET', W[1], 'reserved', s(reserved))
  if K and redis.call('HINCRBY', W[6], K .. ':h', -amount) < 0 then
    redis.call('HSET', W[6], K .. ':h', '0')
  end
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
  if K and charged > 0 then
    spend_count(W[6], K, 'd', tonumber(hday), charged)
    spend_count(W[6], K, 'm', tonumber(hmonth), charged)
  end
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
