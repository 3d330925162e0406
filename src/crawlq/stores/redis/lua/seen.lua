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

-- The bucket state {level, split, count, changed, field width, split
-- since read, added, 2^level} of the crawl, read once per call; false for
-- a crawl from before format 5 (its `seen` set). seen_read makes it from
-- meta's sl, sp, ns and sw, as text (a caller may read them in a command
-- of its own). Without ns (nil) the count is not known (false): seen_add
-- counts what it adds in `added`, for seen_count_added to add to ns.
local function seen_read(level, split, count, width)
  if level then
    local l = small_number(level)
    SEEN = { l, small_number(split), count and tonumber(count) or false, false,
      small_number(width or '12'), false, 0, 2 ^ l }
  else
    SEEN = false
  end
  return SEEN
end

local function seen_state()
  if SEEN == nil then
    local m = redis.call('HMGET', K_META, 'sl', 'sp', 'ns', 'sw')
    seen_read(m[1], m[2], m[3], m[4])
  end
  return SEEN
end

local function seen_bucket(state, fingerprint)
  local x = struct.unpack('>I4', fingerprint)
  local high = state[8]
  local b = x % high
  if b < state[2] then
    b = x % (2 * high)
  end
  return K_SEEN_B .. int_text(b)
end

-- Split bucket S: the fingerprints whose bit L of x is set move to S + 2^L.
local function seen_split(state)
  local level, split = state[1], state[2]
  local high = 2 ^ level
  local old = K_SEEN_B .. int_text(split)
  local moving, fields = {}, {}
  for _, field in ipairs(redis.call('HKEYS', old)) do
    if struct.unpack('>I4', field) % (2 * high) >= high then
      moving[#moving + 1] = field
      fields[#fields + 1] = field
      fields[#fields + 1] = ''
    end
  end
  if #moving > 0 then
    chunked('HSET', K_SEEN_B .. int_text(split + high), fields, 2)
    chunked('HDEL', old, moving, 1)
  end
  split = split + 1
  if split >= high then
    level, split = level + 1, 0
  end
  state[1], state[2], state[4], state[6], state[8] = level, split, true, true, 2 ^ level
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
  state[4] = true
  if state[3] then
    state[3] = state[3] + 1
    while state[3] > SEEN_LOAD * (state[8] + state[2]) do
      seen_split(state)
    end
  else
    state[7] = state[7] + 1 -- (split by seen_count_added)
  end
  return true
end

-- After seen_adds with the count not read (see seen_read): add what they
-- added to meta ns (an HINCRBY, whose integer reply needs no parsing), run
-- the splits the new count calls for (a batch's fingerprints were all put
-- in the buckets as they were: a split moves each by its bits, wherever
-- it came from), and write the new level and split pointer if they moved,
-- with the meta fields `extra` (name, value, ...) if any, in one HSET.
local function seen_count_added(extra)
  local state = SEEN
  local fields = extra
  if state and state[7] > 0 then
    local count = redis.call('HINCRBY', K_META, 'ns', int_text(state[7]))
    state[3], state[7] = count, 0
    while count > SEEN_LOAD * (state[8] + state[2]) do
      seen_split(state)
    end
    if state[6] then
      fields = fields or {}
      local n = #fields
      fields[n + 1], fields[n + 2] = 'sl', int_text(state[1])
      fields[n + 3], fields[n + 4] = 'sp', int_text(state[2])
    end
    state[4], state[6] = false, false
  end
  if fields then
    redis.call('HSET', K_META, unpack(fields))
  end
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

-- Write back what seen_add, seen_split and seen_remove changed: the count,
-- and the level and split pointer when a bucket split.
local function seen_save()
  if SEEN and SEEN[4] then
    if SEEN[6] then
      redis.call('HSET', K_META, 'ns', int_text(SEEN[3]), 'sl', int_text(SEEN[1]), 'sp',
        int_text(SEEN[2]))
    else
      redis.call('HSET', K_META, 'ns', int_text(SEEN[3]))
    end
    SEEN[4], SEEN[6] = false, false
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
