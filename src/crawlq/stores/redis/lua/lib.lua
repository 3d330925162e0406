-- crawlq's Redis function library, part 1: the data layout and what every
-- changing function (add.lua, pop.lua, ack_or_release.lua) shares. The Python side
-- joins the parts into one library (FUNCTION LOAD), named after a hash of
-- its source so different crawlq versions can share a server; its top level
-- runs once at load, so a call pays only for its own work.
--
-- Keys, all under keys[1] = "crawlq:{NAME}:" (the hash tag puts one crawl in
-- one cluster slot; per-host keys are derived here from that prefix):
--   meta     hash    format, lifo, dedup settings, counters: seq (ids handed
--                    to adds: every request offered), seen (Bloom), capped,
--                    accepted, popped (unpops take off), released, expired,
--                    and queued (the count before format 4, else 0: the
--                    queue's size is queued + accepted - popped + released +
--                    expired), seq0 (seq before format 4)
--   seen     set     16-byte fingerprints (exact dedup of a crawl created
--                    before format 5; newer ones use s:B)
--   s:B      hash    exact dedup since format 5: fingerprints in buckets
--                    (see "Exact dedup" below); meta keeps sl, sp, ns, sw
--   bloom    string  Bloom filter bits (Bloom dedup)
--   l:LANE:HOST list  queued requests of one host in one lane, in the order
--                    they go out: each entry is the 15-digit id then the
--                    encoded request. A lane is a score S (= -priority, an
--                    integer below 2^32 in magnitude) and a direction: LANE
--                    is S as text for FIFO ids (counting up from 0), S .. 'L'
--                    for LIFO ids (counting down from 10^15 - 1, so above
--                    every FIFO id: a batch added in LIFO order comes after
--                    the FIFO ones of its priority). Ids of a lane only grow
--                    (LIFO: shrink) from add to add, so an add is one RPUSH
--                    (LPUSH); a request that comes back (release, expiry,
--                    unpop) is put at its place by id. A list keeps its
--                    entries packed (listpacks of 8 KB) however long it
--                    grows: a queued request costs its payload and ~20 bytes
--                    more, where a hash of id -> payload cost ~70 (Redis
--                    keeps small hashes packed only for values of at most 64
--                    bytes).
--   i:HOST   zset    the lanes of a host's non-empty lists but its head's,
--                    score = 2 S (+ 1 for an L lane), member = LANE: when
--                    the head's lane empties, ZPOPMIN gives the next one
--   q:HOST   zset    (format 5, read only by upgrade_queues) queued ids but
--                    the head: score = -priority, member = 15-digit id
--   p        hash    id -> encoded request of a leased request, and of the
--                    head of a host with no list (its only queued request:
--                    a list key costs ~170 bytes more than a hash entry)
--                    (in format 5, of every queued request). A leased
--                    request's is deleted at its ack, read when it comes back
--   hosts    hash    HOST -> struct '>BI4dd' (flag, leased, ready_at ms, head
--                    score) .. head id, then 'p' when the head is the host's
--                    only queued request, kept in `p` (absent when nothing
--                    is queued; else the head is the first entry of its list
--                    l:LANE:HOST). Flag
--                    R: filed in `ready`; D: filed in `delayed`; I: at its
--                    concurrency limit, filed nowhere until a lease ends. A
--                    host with nothing queued or leased whose delay has passed
--                    is forgotten (its field deleted).
--   ready    zset    one member per ready host: score = its head's score,
--                    member = 8-digit lease count .. head id .. HOST, so ZPOPMIN
--                    takes the highest priority, then the fewest leases, then
--                    the oldest (newest, with lifo) request: the order of
--                    stores/base.py, in O(log hosts).
--   delayed  zset    HOST scored by the time (ms of Redis TIME, with a
--                    fraction) its delay ends
--   leases   zset    request id scored by its lease deadline (ms)
--   accepted hash    HOST -> requests of the host ever accepted
--   seen_at  hash    16-byte fingerprint -> ms of server time it was recorded
--                    (dedup with seen_ttl, instead of `seen`)
--   blocks   hash    HOST -> "<until> <pacing time before the block>" (ms):
--                    while blocked, the host's ready time is its block's end
--   policy   hash    HOST -> "<delay ms> <concurrency>" (either may be
--                    empty): the host's own pacing, over the caller's
--   lease    hash    id -> "<token> <score> <ready_at set by the pop, in
--                    microseconds> " .. HOST;
--                    token = owner:call.n. Also
--                    "@" .. owner -> outcome of the owner's last call, so a
--                    call retried after a lost reply gets the first outcome
--                    instead of running twice (written with the leases, in
--                    the same HSET)
--
-- Arguments common to every changing function (its own ones follow):
--   1 owner  2 call number (prefixed 'r' when the call is a retry)
--   3 lease_timeout ms  4 host_delay ms
--   5 host_concurrency (0: no limit)  6 how many prefetched requests the
--   caller wants to hold after the call (those it sends that stay count)
--   7 score of the caller's last prefetched request ('' if none)
--   8 '1': give the prefetched requests back whatever happens
--   9 n prefetched requests, then n (id, token) pairs
-- A changing function returns {flags, returned, id, token, host, payload, ...}:
-- flags is add's outcome per request ('1' added, '0' duplicate); returned is
-- 1 when the prefetched requests were given back (the leased ones that follow
-- replace them), 0 when they stay (the leased ones that follow, if any, come
-- after them).

local FLAG_R, FLAG_D, FLAG_I = 82, 68, 73

-- The context of the current call, set by begin(). Functions run one at a
-- time, so these library-level variables are never shared between calls.
local ARGS, P, K_META, K_SEEN, K_BLOOM, K_HOSTS, K_READY, K_DELAYED
local K_LEASES, K_LEASE, K_Q, K_P, K_ACCEPTED, K_SEEN_AT, K_BLOCKS, K_POLICY, K_SEEN_B, K_L, K_I
-- The crawl's per-host policies (see host_policies), or false if none.
local HOST_POLICY
local OWNER, RETRY, CALL, LEASE_MS, DELAY_MS, CONCURRENCY, REFILL, WORST, FORCE, NBUF, ARG0
-- Server time in ms with its microseconds as a fraction, read once per call
-- and only when needed: host delays and ready times keep the fraction (in
-- scores and host records, both doubles), so a delay is never cut short by
-- rounding. Lease deadlines are whole ms (rounded down).
local NOW

-- Per crawl (by key prefix), a lower bound of the earliest lease deadline and
-- of the earliest end of a host delay, in ms of server time: a pop skips the
-- range reads of reap() and wake() while nothing can be due. They live in
-- this server's Lua state, shared by every worker's calls; nil means
-- unknown (a new server, a reloaded library), so look. Only these functions
-- add leases or delayed hosts, and a removal keeps a lower bound low enough;
-- keys written behind their back (a restored dump, another crawlq version's
-- library) are seen within BOUND_MS, the furthest a bound is ever set ahead.
local BOUND = { expiry = {}, wake = {} }
local BOUND_MS = 1000
local BOUND_KEYS = 0 -- entries made; past 10,000 (the scratch crawls of
-- self-checks add up), all are forgotten

local function set_bound(kind, value)
  local bounds = BOUND[kind]
  if bounds[P] == nil and value ~= nil then
    BOUND_KEYS = BOUND_KEYS + 1
    if BOUND_KEYS > 10000 then
      BOUND, BOUND_KEYS = { expiry = {}, wake = {} }, 1
      bounds = BOUND[kind]
    end
  end
  bounds[P] = value
end

-- Lower a known bound to `at` (an unknown one stays unknown).
local function lower_bound(kind, at)
  local bounds = BOUND[kind]
  local bound = bounds[P]
  if bound ~= nil and at < bound then
    bounds[P] = at
  end
end
-- Counters (crawlq.Counters) this call moves, written by save(): they are
-- the only record of the queue's size (queued = queued + accepted - popped +
-- released + expired, from the meta hash), so counting costs no command.
local hosts, n_accepted, n_popped, n_released, n_expired
-- Ids whose lease ended in this call (their leases and lease records go in
-- one ZREM and one HDEL), and their payloads' ids in `p` (one HDEL).
local ended, freed

-- Key names by prefix, made once per crawl rather than once per call (each
-- concatenation makes a string, and strings made per call feed the GC).
local KEY_NAMES = {}
local KEY_NAMES_MADE = 0
-- Per crawl, its `policy` hash as a table (HOST -> {delay ms or nil,
-- concurrency or nil}), or false when it is empty: read once per library
-- load, kept current by control(), so pacing without host policies costs
-- one table lookup per call.
local POLICIES = {}
-- The exact dedup's bucket state of the current call (see seen_state).
local SEEN

local function set_keys(prefix)
  P = prefix
  local names = KEY_NAMES[P]
  if names == nil then
    names = { P .. 'meta', P .. 'seen', P .. 'bloom', P .. 'hosts', P .. 'ready',
      P .. 'delayed', P .. 'leases', P .. 'lease', P .. 'q:', P .. 'p', P .. 'accepted',
      P .. 'seen_at', P .. 'blocks', P .. 'policy', P .. 's:', P .. 'l:', P .. 'i:' }
    KEY_NAMES_MADE = KEY_NAMES_MADE + 1
    if KEY_NAMES_MADE > 10000 then -- self-checks' scratch crawls add up
      KEY_NAMES, KEY_NAMES_MADE, POLICIES = {}, 1, {}
    end
    KEY_NAMES[P] = names
  end
  K_META, K_SEEN, K_BLOOM, K_HOSTS, K_READY, K_DELAYED, K_LEASES, K_LEASE, K_Q, K_P,
    K_ACCEPTED, K_SEEN_AT, K_BLOCKS, K_POLICY, K_SEEN_B, K_L, K_I = unpack(names)
  SEEN = nil
  local policies = POLICIES[P]
  if policies == nil then
    policies = {}
    local flat = redis.call('HGETALL', K_POLICY)
    for i = 1, #flat, 2 do
      local delay, concurrency = string.match(flat[i + 1], '^(%S*) (%S*)$')
      policies[flat[i]] = { tonumber(delay), tonumber(concurrency) }
    end
    if next(policies) == nil then
      policies = false
    end
    POLICIES[P] = policies
  end
  HOST_POLICY = policies
end

local function begin(keys, args)
  ARGS = args
  set_keys(keys[1])
  OWNER = args[1]
  RETRY = string.sub(args[2], 1, 1) == 'r'
  CALL = string.match(args[2], '%d+')
  LEASE_MS = tonumber(args[3])
  DELAY_MS = tonumber(args[4]) / 1000 -- sent in microseconds
  CONCURRENCY = tonumber(args[5])
  REFILL = tonumber(args[6])
  WORST = tonumber(args[7])
  FORCE = args[8] == '1'
  NBUF = tonumber(args[9])
  ARG0 = 9 + 2 * NBUF
  NOW = nil
  hosts, n_accepted, n_popped, n_released, n_expired = {}, 0, 0, 0, 0
  ended, freed = {}, {}
end

-- Lease counts as the 8-digit prefix of a ready member; a table lookup is
-- about three times cheaper than string.format in this interpreter.
local PADDED = {}

local function padded(count)
  local text = PADDED[count]
  if text == nil then
    text = string.format('%08d', count)
    if count < 4096 then
      PADDED[count] = text
    end
  end
  return text
end

-- Integers as text, small ones by table lookup rather than number
-- formatting: a number given to redis.call is formatted too (with %.17g),
-- and that costs as much as a cheap command. Scores and counts go as text.
local INT_TEXT = {}

local function int_text(n)
  local text = INT_TEXT[n]
  if text == nil then
    text = string.format('%d', n)
    if n < 4096 and n > -4096 then
      INT_TEXT[n] = text
    end
  end
  return text
end

-- A host's delay (ms) and concurrency limit (0: none): its own, or the caller's.
local function delay_of(name)
  local own = HOST_POLICY and HOST_POLICY[name]
  if own and own[1] then
    return own[1]
  end
  return DELAY_MS
end

local function limit_of(name)
  local own = HOST_POLICY and HOST_POLICY[name]
  if own and own[2] then
    return own[2]
  end
  return CONCURRENCY
end

local function now()
  if NOW == nil then
    local clock = redis.call('TIME')
    NOW = tonumber(clock[1]) * 1000 + tonumber(clock[2]) / 1000
  end
  return NOW
end

-- Call a variadic command over a long argument list, a few thousand at a time
-- (unpack has a C stack limit).
local function chunked(command, key, list, stride)
  local step = 4000 - 4000 % stride
  for i = 1, #list, step do
    redis.call(command, key, unpack(list, i, math.min(i + step - 1, #list)))
  end
end

-- A time in ms with a fraction, as a score: exact (%.17g round-trips a double).
local function time_text(ms)
  return string.format('%.17g', ms)
end

-- The ready time a pop set, for its lease record: whole microseconds (records
-- stay "token score digits host"), compared to a host's ready time by
-- same_time.
local function micros_text(ms)
  return string.format('%d', math.floor(ms * 1000 + 0.5))
end

local function same_time(ms, micros)
  return math.abs(ms * 1000 - micros) < 1
end

local function lease_token(record)
  return string.match(record, '^(%S+) ')
end

local function parse_lease(record)
  local token, score, set, name = string.match(record, '^(%S+) (%S+) (%d+) (.*)$')
  return token, score, tonumber(set), name
end

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

-- The state of a host, read once per script and written back by save().
local function host(name)
  local state = hosts[name]
  if state then
    return state
  end
  state = { leased = 0, ready = 0 }
  local value = redis.call('HGET', K_HOSTS, name)
  if value then
    local flag, leased, ready, head_score = struct.unpack('>BI4dd', value)
    state.flag, state.leased, state.ready = flag, leased, ready
    if #value > 21 then
      state.head_score, state.head_id = head_score, string.sub(value, 22, 36)
      state.alone = #value > 36
    end
    if flag == FLAG_R then
      state.filed = padded(leased) .. state.head_id .. name
    elseif flag == FLAG_D then
      state.delayed_at = ready
    end
  end
  hosts[name] = state
  return state
end

-- File a host where its state calls for (the Board.place of crawlq._policy):
-- ready, delayed, idle at its concurrency limit, or forgotten. With `later`,
-- a ZADD to `ready` is appended there (score, member) for the caller to run.
local function place(name, state, later)
  local flag
  local limit = CONCURRENCY
  if HOST_POLICY then
    limit = limit_of(name)
  end
  if state.head_id == nil or (limit > 0 and state.leased >= limit) then
    if state.head_id == nil and state.leased <= 0 then
      if state.ready > now() then
        flag = FLAG_D -- keep its pacing until the delay has passed
      end
    else
      flag = FLAG_I
    end
  elseif state.ready > now() then
    flag = FLAG_D
  else
    flag = FLAG_R
  end
  local member = nil
  if flag == FLAG_R then
    member = padded(state.leased) .. state.head_id .. name
  end
  if state.filed ~= member then
    if state.filed then
      redis.call('ZREM', K_READY, state.filed)
    end
    if member and later then
      later[#later + 1] = int_text(state.head_score)
      later[#later + 1] = member
    elseif member then
      redis.call('ZADD', K_READY, int_text(state.head_score), member)
    end
    state.filed = member
  end
  local delayed_at = nil
  if flag == FLAG_D then
    delayed_at = state.ready
  end
  if state.delayed_at ~= delayed_at then
    if delayed_at then
      redis.call('ZADD', K_DELAYED, time_text(delayed_at), name)
      lower_bound('wake', delayed_at)
    else
      redis.call('ZREM', K_DELAYED, name)
    end
    state.delayed_at = delayed_at
  end
  state.flag = flag
  state.dirty = true
end

local function save()
  local set, forget = {}, {}
  for name, state in pairs(hosts) do
    if state.dirty then
      if state.flag then
        set[#set + 1] = name
        set[#set + 1] = struct.pack('>BI4dd', state.flag, state.leased, state.ready,
          state.head_score or 0) .. (state.head_id or '') .. (state.alone and 'p' or '')
      else
        forget[#forget + 1] = name
      end
    end
  end
  if #set > 0 then
    chunked('HSET', K_HOSTS, set, 2)
  end
  if #forget > 0 then
    chunked('HDEL', K_HOSTS, forget, 1)
  end
  if n_accepted ~= 0 then
    redis.call('HINCRBY', K_META, 'accepted', int_text(n_accepted))
  end
  if n_popped ~= 0 then
    redis.call('HINCRBY', K_META, 'popped', int_text(n_popped))
  end
  if n_released ~= 0 then
    redis.call('HINCRBY', K_META, 'released', int_text(n_released))
  end
  if n_expired ~= 0 then
    redis.call('HINCRBY', K_META, 'expired', int_text(n_expired))
  end
end

-- Put `entry` (an id and a payload) back at its place by id in list `key`,
-- of ids in ascending order: a request coming back (release, expiry) is
-- older than those added since it left (or, with lifo, newer: then the walk
-- passes them), so the walk from the front is short in a FIFO crawl.
-- Returns the list's new length.
local function insert_by_id(key, id, entry)
  local first = redis.call('LINDEX', key, 0)
  if not first or id < string.sub(first, 1, 15) then
    return redis.call('LPUSH', key, entry)
  end
  local at = 1
  while true do
    local chunk = redis.call('LRANGE', key, at, at + 127)
    for _, e in ipairs(chunk) do
      if string.sub(e, 1, 15) > id then
        return redis.call('LINSERT', key, 'BEFORE', e, entry)
      end
    end
    if #chunk < 128 then
      return redis.call('RPUSH', key, entry)
    end
    at = at + 128
  end
end

-- The lane of a request (see l:LANE:HOST) from its score and id.
local function lane_of(score, id)
  if string.byte(id, 1) >= 53 then -- '5': a LIFO id
    return int_text(score) .. 'L'
  end
  return int_text(score)
end

-- A lane's score in a host's index i:HOST.
local function lane_rank(lane)
  local score, lifo = string.match(lane, '^(-?%d+)(L?)$')
  return string.format('%d', 2 * tonumber(score) + (lifo == 'L' and 1 or 0))
end

-- Queue request `id` of host `name`: `payload` is its encoded request, or
-- nil when it is in `p` already (a leased request coming back). A host's
-- only request stays in (or goes to) `p` ("alone" in its record); others go
-- to their lane's list: at the end (`how` 'tail', a FIFO add: its id is the
-- lane's highest), the front ('front', a LIFO add: the lowest) or at their
-- place by id ('back', a request coming back). Returns true when it became
-- the host's head: the caller must then place the host.
local function enqueue(name, state, score, id, payload, how)
  score = tonumber(score)
  if state.head_id == nil then
    if payload then
      redis.call('HSET', K_P, id, payload)
    end
    state.head_score, state.head_id, state.alone = score, id, true
    return true
  end
  local head = state.head_score
  if state.alone then
    -- A second request: the first moves from `p` to its list.
    local first = redis.call('HGET', K_P, state.head_id) or ''
    redis.call('HDEL', K_P, state.head_id)
    redis.call('RPUSH', K_L .. lane_of(head, state.head_id) .. ':' .. name, state.head_id .. first)
    state.alone, state.dirty = false, true
  end
  if payload == nil then
    payload = redis.call('HGET', K_P, id) or ''
    freed[#freed + 1] = id
  end
  local lane = lane_of(score, id)
  local key = K_L .. lane .. ':' .. name
  local entry = id .. payload
  local length
  if how == 'tail' then
    length = redis.call('RPUSH', key, entry)
  elseif how == 'front' then
    length = redis.call('LPUSH', key, entry)
  else
    length = insert_by_id(key, id, entry)
  end
  -- Lanes sort as their requests do: a new lane is the head's, or another.
  local first = score < head or (score == head and id < state.head_id)
  if length == 1 then
    if first then
      local head_lane = lane_of(head, state.head_id)
      redis.call('ZADD', K_I .. name, lane_rank(head_lane), head_lane)
    else
      redis.call('ZADD', K_I .. name, lane_rank(lane), lane)
    end
  end
  if first then
    state.head_score, state.head_id = score, id
  end
  return first
end

-- Take the head request off host `name`'s queue and make the next one its
-- head. Returns the id and payload of the request taken, and whether that
-- payload is in `p` already (the host's only request).
local function dequeue(name, state)
  local id = state.head_id
  if state.alone then
    state.head_score, state.head_id, state.alone = nil, nil, false
    return id, redis.call('HGET', K_P, id) or '', true
  end
  local lane = lane_of(state.head_score, id)
  local key = K_L .. lane .. ':' .. name
  local entry = redis.call('LPOP', key)
  if not entry then
    -- A host filed in `ready` by its head alone (take() did not read its
    -- record): its only request is in `p`.
    state.head_score, state.head_id = nil, nil
    return id, redis.call('HGET', K_P, id) or '', true
  end
  local after = redis.call('LINDEX', key, 0)
  if after then
    state.head_id = string.sub(after, 1, 15)
  else
    local best = redis.call('ZPOPMIN', K_I .. name)[1]
    if best then
      after = redis.call('LINDEX', K_L .. best .. ':' .. name, 0)
    end
    if after then
      state.head_score = tonumber(string.match(best, '^-?%d+'))
      state.head_id = string.sub(after, 1, 15)
    else
      state.head_score, state.head_id = nil, nil
    end
  end
  return string.sub(entry, 1, 15), string.sub(entry, 16), false
end

-- End the lease of request `id`: 'ack' finishes it; 'release' and 'expire'
-- put it back in its place; 'unpop' puts back a prefetched request that was
-- never handed out, and also undoes the host delay its pop started (the host
-- was ready before that pop, so "ready since 0" is the same as before).
local function end_lease(id, record, how)
  local _, score, set, name = parse_lease(record)
  local state = host(name)
  state.leased = math.max(0, state.leased - 1)
  if how == 'ack' then
    freed[#freed + 1] = id
  else
    enqueue(name, state, score, id, nil, 'back')
    if how == 'release' then
      n_released = n_released + 1
    elseif how == 'expire' then
      n_expired = n_expired + 1
    else -- 'unpop': never handed out, so not popped
      n_popped = n_popped - 1
      if same_time(state.ready, set) then
        state.ready = 0
      end
    end
  end
  place(name, state)
  ended[#ended + 1] = id
  return name
end

-- Drop the leases that end_lease ended (before anything leases them again).
local function drop_ended()
  if #ended > 0 then
    chunked('ZREM', K_LEASES, ended, 1)
    chunked('HDEL', K_LEASE, ended, 1)
    ended = {}
  end
  if #freed > 0 then
    chunked('HDEL', K_P, freed, 1)
    freed = {}
  end
end

-- End the leases given as `count` (id, token) pairs from ARGS[first] on,
-- with `how` ('ack' or 'release'). A pair whose token is not the request's
-- current lease (acked already, or expired and leased again) is ignored.
-- Returns the best head score among the hosts whose lease count (or queue)
-- changed: what may now come before the caller's prefetched requests.
local function end_leases(first, count, how)
  if count == 0 then
    return nil
  end
  local ids = {}
  for i = 1, count do
    ids[i] = ARGS[first + 2 * (i - 1)]
  end
  local records = redis.call('HMGET', K_LEASE, unpack(ids))
  local affected = {}
  for i = 1, count do
    local record = records[i]
    if record and lease_token(record) == ARGS[first + 2 * i - 1] then
      affected[end_lease(ids[i], record, how)] = true
    end
  end
  drop_ended()
  local best = nil
  for name in pairs(affected) do
    local head = hosts[name].head_score
    if head ~= nil and (best == nil or head < best) then
      best = head
    end
  end
  return best
end

-- The earliest score of a sorted set, or math.huge if it is empty.
local function earliest(key)
  local first = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
  return first[2] and tonumber(first[2]) or math.huge
end

-- Expired leases come back by themselves: every pop first puts them back.
local function reap()
  local bound = BOUND.expiry[P]
  if bound ~= nil and bound > now() then
    return
  end
  local expired = redis.call('ZRANGEBYSCORE', K_LEASES, '-inf', now(), 'LIMIT', 0, 256)
  if #expired == 0 then
    set_bound('expiry', math.min(earliest(K_LEASES), now() + BOUND_MS))
    return
  end
  local records = redis.call('HMGET', K_LEASE, unpack(expired))
  for i, id in ipairs(expired) do
    if records[i] then
      end_lease(id, records[i], 'expire')
    else
      ended[#ended + 1] = id -- no record behind it
      freed[#freed + 1] = id
    end
  end
  drop_ended()
  set_bound('expiry', nil) -- 256 at most: look again next time
end

-- Hosts whose delay has passed become ready (or are forgotten).
local function wake()
  local bound = BOUND.wake[P]
  if bound ~= nil and bound > now() then
    return
  end
  local due = redis.call('ZRANGEBYSCORE', K_DELAYED, '-inf', now(), 'LIMIT', 0, 256)
  for _, name in ipairs(due) do
    local state = host(name)
    if state.delayed_at == nil then
      redis.call('ZREM', K_DELAYED, name) -- no state behind it
    else
      place(name, state)
    end
  end
  set_bound('wake', #due < 256 and math.min(earliest(K_DELAYED), now() + BOUND_MS) or nil)
end

-- Lease up to n requests in order into `out` (id, token, host, payload, ...);
-- their ids are appended to `taken`, for the replay record, and their lease
-- records to `records`, for the caller to write.
--
-- Hosts are taken from `ready` a round at a time (one ZPOPMIN for many), and
-- re-filed with their next head in one ZADD at the end of the round. That is
-- the order of one-at-a-time pops as long as no re-filed host sorts before
-- the round's last host; one that does is merged into the rest of the round
-- at its place instead. What the round does not use goes back.
local function take(n, out, taken, records)
  if n <= 0 then
    return
  end
  reap()
  wake()
  local deadline = math.floor(now()) + LEASE_MS
  local deadline_text = int_text(deadline)
  local token_prefix = OWNER .. ':' .. CALL .. '.'
  local delayed_text = DELAY_MS > 0 and micros_text(NOW + DELAY_MS)
  local deadlines = {}
  -- id, payload, ...: the payloads of the leased requests, kept in `p`
  -- until their ack (a request that comes back needs its payload).
  local kept = {}
  -- Explicit ends: the # operator is a search in this Lua.
  local o, r, t = #out, #records, #taken
  local got = 0
  while got < n do
    local round = redis.call('ZPOPMIN', K_READY, n - got)
    local count = #round / 2
    if count == 0 then
      break
    end
    -- Each host's member, head score, and that score as the server wrote it.
    local members, scores, texts = {}, {}, {}
    for i = 1, count do
      members[i], scores[i], texts[i] = round[2 * i - 1], tonumber(round[2 * i]), round[2 * i]
    end
    local later = {}
    local j = 1
    while j <= count and got < n do
      local member, score, score_text = members[j], scores[j], texts[j]
      j = j + 1
      local name = string.sub(member, 24)
      local state = hosts[name]
      if state == nil then
        -- A ready host's member holds its state (a ready time in the past
        -- is the same as 0): no need to read it.
        state = { flag = FLAG_R, leased = tonumber(string.sub(member, 1, 8)), ready = 0,
          head_id = string.sub(member, 9, 23), head_score = score, filed = member }
        hosts[name] = state
      end
      if state.filed == member then -- else a stale entry: dropped
        state.filed = nil
        local id, payload, in_p = dequeue(name, state)
        n_popped = n_popped + 1
        state.leased = state.leased + 1
        local delay = DELAY_MS
        if HOST_POLICY then
          delay = delay_of(name)
        end
        if delay > 0 then
          state.ready = NOW + delay
        end
        place(name, state, later)
        got = got + 1
        -- Unique without a counter: the owner's call number and the position.
        local token = token_prefix .. int_text(got)
        deadlines[2 * got - 1] = deadline_text
        deadlines[2 * got] = id
        local ready = (delay == DELAY_MS and delayed_text) or (state.ready == 0 and '0')
          or micros_text(state.ready)
        records[r + 1] = id
        records[r + 2] = token .. ' ' .. score_text .. ' ' .. ready .. ' ' .. name
        r = r + 2
        out[o + 1] = id
        out[o + 2] = token
        out[o + 3] = name
        out[o + 4] = payload
        o = o + 4
        if not in_p then
          kept[#kept + 1] = id
          kept[#kept + 1] = payload
        end
        t = t + 1
        taken[t] = id
        local head, filed = state.head_score, state.filed
        if filed and j <= count and (head < scores[count] or
            (head == scores[count] and filed < members[count])) then
          -- This host competes with the rest of the round: merge it in
          -- there, rather than in `ready` (place() put it last in `later`).
          later[#later] = nil
          later[#later] = nil
          local k = j
          while scores[k] < head or (scores[k] == head and members[k] < filed) do
            k = k + 1
          end
          table.insert(members, k, filed)
          table.insert(scores, k, head)
          table.insert(texts, k, int_text(head))
          count = count + 1
        end
      end
    end
    for k = j, count do -- unused: back to `ready`
      later[#later + 1] = texts[k]
      later[#later + 1] = members[k]
    end
    if #later > 0 then
      redis.call('ZADD', K_READY, unpack(later))
    end
  end
  if got > 0 then
    redis.call('ZADD', K_LEASES, unpack(deadlines))
    lower_bound('expiry', deadline)
    if #kept > 0 then
      chunked('HSET', K_P, kept, 2)
    end
  end
end

-- Give back the leases of the caller's call whose reply it never got. The
-- call number arrives as "N" or "rN" (a retry), followed by "gL" when calls
-- from L on went unanswered (the caller gave up retrying): the caller's
-- replay record, if it is of such a call, names the leases that call took
-- (all of them, or it would have written another record since). Those still
-- held under that call's tokens go back, and the host delays their pops
-- started are undone, so the crawl resumes at once rather than after
-- lease_timeout.
local function give_back_lost()
  local lost = string.match(ARGS[2], 'g(%d+)$')
  if lost == nil then
    return
  end
  local last = redis.call('HGET', K_LEASE, '@' .. OWNER)
  if last == false then
    return
  end
  -- (flags: add's outcome per request, then a cluster shard's ':' mark)
  local call, taken = string.match(last, '^(%d+)\n[01]*:?%d*\n[01]\n(.*)$')
  if call == nil or call == CALL or tonumber(call) < tonumber(lost) then
    return
  end
  local n = 0
  for id in string.gmatch(taken, '%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d') do
    n = n + 1
    local record = redis.call('HGET', K_LEASE, id)
    if record and lease_token(record) == OWNER .. ':' .. call .. '.' .. n then
      end_lease(id, record, 'unpop')
    end
  end
  drop_ended()
end

-- The common end of a changing script: give the caller's prefetched requests
-- back if this call may have changed what comes before them (a request at
-- least as good as the last prefetched one became ready: `best` is the best
-- such score), lease the refill, save, and remember the outcome for a retry.
-- Prefetched requests that stay are followed by what is leased now: nothing
-- that became ready in this caller's calls comes before them (it would have
-- given them back), so the order stays exact for one worker.
local function conclude(flags, best)
  local out, taken, records = { flags, 0 }, {}, {}
  give_back_lost()
  if NBUF > 0 and (FORCE or (best ~= nil and WORST ~= nil and best <= WORST)) then
    out[2] = 1
    local ids = {}
    for i = 1, NBUF do
      ids[i] = ARGS[8 + 2 * i]
    end
    local held = redis.call('HMGET', K_LEASE, unpack(ids))
    for i = 1, NBUF do
      if held[i] and lease_token(held[i]) == ARGS[9 + 2 * i] then
        end_lease(ids[i], held[i], 'unpop')
      end
    end
    drop_ended()
    take(REFILL, out, taken, records)
  else
    take(REFILL - NBUF, out, taken, records) -- (nothing when NBUF >= REFILL)
  end
  save()
  -- Only outcomes that running twice would change need remembering: add's
  -- flags and leases taken. Acks, releases and give-backs repeat harmlessly.
  if flags ~= '' or #taken > 0 then
    records[#records + 1] = '@' .. OWNER
    records[#records + 1] = CALL .. '\n' .. flags .. '\n' .. out[2] .. '\n' .. table.concat(taken)
  end
  if #records > 0 then
    redis.call('HSET', K_LEASE, unpack(records))
  end
  return out
end

-- A retried call whose first run completed: that run's outcome, else nil.
local function replayed()
  if not RETRY then
    return nil
  end
  local last = redis.call('HGET', K_LEASE, '@' .. OWNER)
  if last == false then
    return nil
  end
  local call, flags, returned, taken = string.match(last, '^(%d+)\n([01]*:?%d*)\n([01])\n(.*)$')
  if call ~= CALL then
    return nil
  end
  local out = { flags, tonumber(returned) }
  local n = 0
  for id in string.gmatch(taken, '%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d') do
    n = n + 1
    local token = OWNER .. ':' .. CALL .. '.' .. n -- as take() made it
    local record = redis.call('HGET', K_LEASE, id)
    if record and lease_token(record) == token then
      local _, _, _, name = parse_lease(record)
      out[#out + 1] = id
      out[#out + 1] = token
      out[#out + 1] = name
      out[#out + 1] = redis.call('HGET', K_P, id) or ''
    end
  end
  return out
end
