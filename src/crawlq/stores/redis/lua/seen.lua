-- crawlq's Redis function library: dedup, for add.lua, read.lua and
-- forget: exact dedup in buckets (s:B, or the `seen` set of a crawl from
-- before format 5), and the Bloom filter's bits (`bloom`). Relies on
-- shared.lua (key names, SEEN, chunked).

-- Exact dedup (format 5). Fingerprints sit in small hashes, "buckets"
-- (s:B), which Redis keeps listpack-encoded while they hold at most
-- hash-max-listpack-entries (512 by default): a field of a fingerprint's
-- first W bytes (meta sw; 11 since format 6, 12 before: 88 bits decide a
-- duplicate, so a crawl of 10^9 URLs has a chance of 2 in 10^9 of one
-- false duplicate) and an empty value, about W + 4 bytes each, where a set
-- of 16-byte members costs 79. Buckets are found by
-- linear hashing on the first 4 bytes, x: with level L and split pointer S
-- (meta sl, sp), the bucket is x mod 2^L, or x mod 2^(L+1) when that is
-- below S. Once the count (meta ns) passes SEEN_LOAD per bucket, bucket S
-- splits in two by x mod 2^(L+1) and S moves on (L grows when S reaches
-- 2^L), so a bucket holds about SEEN_LOAD fingerprints (twice that at most,
-- on average, just before its split) whatever the crawl's size, and a
-- lookup is one HEXISTS on a listpack.
local SEEN_LOAD = 48

-- The bucket state {level, split, count, changed, field width} of the
-- crawl, read once per call; false for a crawl from before format 5 (its
-- `seen` set).
local function seen_state()
  if SEEN == nil then
    local m = redis.call('HMGET', K_META, 'sl', 'sp', 'ns', 'sw')
    if m[1] then
      SEEN = { tonumber(m[1]), tonumber(m[2]), tonumber(m[3]), false, tonumber(m[4] or '12') }
    else
      SEEN = false
    end
  end
  return SEEN
end

local function seen_bucket(state, fingerprint)
  local x = struct.unpack('>I4', fingerprint)
  local b = x % 2 ^ state[1]
  if b < state[2] then
    b = x % 2 ^ (state[1] + 1)
  end
  return K_SEEN_B .. string.format('%d', b)
end

-- Split bucket S: the fingerprints whose bit L of x is set move to S + 2^L.
local function seen_split(state)
  local level, split = state[1], state[2]
  local high = 2 ^ level
  local old = K_SEEN_B .. string.format('%d', split)
  local moving, fields = {}, {}
  for _, field in ipairs(redis.call('HKEYS', old)) do
    if struct.unpack('>I4', field) % (2 * high) >= high then
      moving[#moving + 1] = field
      fields[#fields + 1] = field
      fields[#fields + 1] = ''
    end
  end
  if #moving > 0 then
    chunked('HSET', K_SEEN_B .. string.format('%d', split + high), fields, 2)
    chunked('HDEL', old, moving, 1)
  end
  split = split + 1
  if split >= high then
    level, split = level + 1, 0
  end
  state[1], state[2], state[4] = level, split, true
end

-- Record a fingerprint as seen; true if it was not (exact dedup).
local function seen_add(fingerprint)
  local state = seen_state()
  if not state then
    return redis.call('SADD', K_SEEN, fingerprint) == 1
  end
  local field = string.sub(fingerprint, 1, state[5])
  if redis.call('HSETNX', seen_bucket(state, fingerprint), field, '') == 0 then
    return false
  end
  state[3], state[4] = state[3] + 1, true
  while state[3] > SEEN_LOAD * (2 ^ state[1] + state[2]) do
    seen_split(state)
  end
  return true
end

-- Whether a fingerprint was recorded (exact dedup), without recording it.
local function seen_has(fingerprint)
  local state = seen_state()
  if not state then
    return redis.call('SISMEMBER', K_SEEN, fingerprint) == 1
  end
  local field = string.sub(fingerprint, 1, state[5])
  return redis.call('HEXISTS', seen_bucket(state, fingerprint), field) == 1
end

-- Drop a fingerprint from the exact seen set; true if it was there.
local function seen_remove(fingerprint)
  local state = seen_state()
  if not state then
    return redis.call('SREM', K_SEEN, fingerprint) == 1
  end
  local field = string.sub(fingerprint, 1, state[5])
  if redis.call('HDEL', seen_bucket(state, fingerprint), field) == 0 then
    return false
  end
  state[3], state[4] = state[3] - 1, true
  return true
end

-- Write back what seen_add, seen_split and seen_remove changed.
local function seen_save()
  if SEEN and SEEN[4] then
    redis.call('HSET', K_META, 'sl', string.format('%d', SEEN[1]), 'sp',
      string.format('%d', SEEN[2]), 'ns', string.format('%d', SEEN[3]))
    SEEN[4] = false
  end
end

-- How many fingerprints the exact dedup holds.
local function seen_count()
  local state = seen_state()
  if not state then
    return redis.call('SCARD', K_SEEN)
  end
  return state[3]
end

-- Bloom dedup: a fingerprint's bits in `bloom` (m = `bits` of them) are, by
-- Kirsch-Mitzenmacher, bit j = (h1 + j * h2) mod m for j below `hashes`,
-- h1 and h2 its first two 4-byte words. The BITFIELD operations on them:
-- GET each bit, or (`set`) SET it to 1, which replies with the old bit.
local function bloom_ops(fingerprint, bits, hashes, set)
  local h1, h2 = struct.unpack('>I4I4', fingerprint)
  local op = set and 'SET' or 'GET'
  local ops = {}
  for j = 0, hashes - 1 do
    ops[#ops + 1] = op
    ops[#ops + 1] = 'u1'
    ops[#ops + 1] = (h1 + j * h2) % bits
    if set then
      ops[#ops + 1] = 1
    end
  end
  return ops
end

-- Whether a fingerprint counts as seen by the Bloom filter (all its bits
-- set: seen, or a false positive), without recording it.
local function bloom_has(fingerprint, bits, hashes)
  local ops = bloom_ops(fingerprint, bits, hashes, false)
  for _, bit in ipairs(redis.call('BITFIELD_RO', K_BLOOM, unpack(ops))) do
    if bit == 0 then
      return false
    end
  end
  return true
end

-- Record a fingerprint in the Bloom filter; true if it was not seen (one of
-- its bits was clear). One BITFIELD checks and sets atomically.
local function bloom_add(fingerprint, bits, hashes)
  local new = false
  local ops = bloom_ops(fingerprint, bits, hashes, true)
  for _, old in ipairs(redis.call('BITFIELD', K_BLOOM, unpack(ops))) do
    if old == 0 then
      new = true
    end
  end
  return new
end
