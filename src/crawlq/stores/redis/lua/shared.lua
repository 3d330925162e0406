-- crawlq's Redis function library, shared part: the data layout (the keys
-- below), the state of the current call, and the helpers every other part
-- uses (key names and per-crawl caches, server time, integers and times as
-- text, meta counters, chunked commands). It relies on no other file. The
-- Python side (Library.PARTS) joins the parts into one library (FUNCTION
-- LOAD): this file, then seen.lua (dedup), hosts.lua (host records and
-- pacing), queues.lua (per-host lists), leases.lua (lease records and their
-- end), due.lua (scheduled requests: held until their due time) and
-- refill.lua (the frame of a changing call: begin, take, conclude, replay),
-- then the entry points (add.lua, links.lua: the lean add of a call that
-- carries only links, pop.lua, ack_or_release.lua, control.lua, read.lua,
-- inspect.lua, open.lua), so each local function is
-- defined before the text that calls it. The library is named after a hash
-- of its source so different crawlq versions can share a server; its top
-- level runs once at load, so a call pays only for its own work.
--
-- Keys, all under keys[1] = "crawlq:{NAME}:" (the hash tag puts one crawl in
-- one cluster slot; per-host keys are derived here from that prefix):
--   meta     hash    format, lifo, dedup settings, counters: seq (ids handed
--                    to adds: every request offered, and one per refetch),
--                    seen (Bloom), capped, accepted, popped (unpops take
--                    off), released, expired, refetched (acks that scheduled
--                    their request again), revisits (the refetches in `due`
--                    now), and queued (the count before format 4, else 0:
--                    the queue's size is queued + accepted + refetched -
--                    popped + released + expired - ZCARD due), seq0 (seq
--                    before format 4), idb (a cluster shard's next number)
--   seen     set     16-byte fingerprints (exact dedup of a crawl created
--                    before format 5; newer ones use s:B)
--   s:B      hash    exact dedup since format 5: fingerprints in buckets
--                    (see "Exact dedup" in seen.lua); meta keeps sl, sp, ns, sw
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
--                    unpop, or due) is put at its place by id when that is
--                    near the list's front or end, else filed in r:HOST
--                    (format 8; see queues.lua). A list keeps its
--                    entries packed (listpacks of 8 KB) however long it
--                    grows: a queued request costs its payload and ~20 bytes
--                    more, where a hash of id -> payload cost ~70 (Redis
--                    keeps small hashes packed only for values of at most 64
--                    bytes).
--                    An entry whose 16th byte is '^' is marked (format 8):
--                    the host's head is while r:HOST is not empty (an
--                    entry keeps its mark when a request that comes first
--                    arrives); its encoded request follows the mark.
--   r:HOST   zset    (format 8) queued requests of a host that came back or
--                    came due deeper in their lane than the few entries
--                    looked at: score = lane rank (2 S, + 1 for an L lane),
--                    member = 15-digit id; payloads in `p` under their ids.
--                    Never the host's head: the first moves to its list's
--                    front when it comes next
--   i:HOST   zset    the lanes of a host's non-empty lists but its head's,
--                    score = 2 S (+ 1 for an L lane), member = LANE: when
--                    the head's lane empties, ZPOPMIN gives the next one
--   q:HOST   zset    (format 5, read only by upgrade_queues) queued ids but
--                    the head: score = -priority, member = 15-digit id
--   p        hash    id -> encoded request of a leased request, and of the
--                    head of a host with no list (its only queued request:
--                    a list key costs ~170 bytes more than a hash entry)
--                    and of a request in r:HOST
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
--   due      zset    (format 7) scheduled requests, held until their due
--                    time: score = due time (ms of Redis TIME, with a
--                    fraction), member = 15-digit id .. kind ('w' waiting:
--                    an add's not_before or a delayed release; 'r' a
--                    revisit: a refetch) .. score S .. ' ' .. HOST. Their
--                    payloads are in `p` under their ids; they are in no
--                    host's queue and count in no host's leases until due
--                    (see due.lua)
--   lease    hash    id -> "<token> <score> <ready_at set by the pop, in
--                    microseconds> " .. HOST;
--                    token = owner:call.n. Also
--                    "@" .. owner -> outcome of the owner's last call, so a
--                    call retried after a lost reply gets the first outcome
--                    instead of running twice (written with the leases, in
--                    the same HSET; by add_links only when it accepted or
--                    capped a link, see links.lua)
--   Wide entries (format 9): `ready` and `leases` hold member WIDE with
--                    score +inf, `hosts` field '' (no host is empty) and
--                    `lease` field '@' (no owner is empty) with value WIDE,
--                    from the crawl's first open on. Longer than Redis keeps
--                    packed (64 bytes), they keep those keys a skiplist and
--                    hashtables however few entries they hold: packed, every
--                    ZADD, ZREM, HGET and HSET there searched from the start
--                    (15% of a step's server instructions with 60 hosts, as a
--                    cluster shard holds). Readers skip them; they are never
--                    popped, counted or listed.
local FLAG_R, FLAG_D, FLAG_I = 82, 68, 73
-- (a literal: the library's top level may not use `string`)
local WIDE = '~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~'

-- The context of the current call, set by begin(). Functions run one at a
-- time, so these library-level variables are never shared between calls.
local ARGS, P, K_META, K_SEEN, K_BLOOM, K_HOSTS, K_READY, K_DELAYED
local K_LEASES, K_LEASE, K_Q, K_P, K_ACCEPTED, K_SEEN_AT, K_BLOCKS, K_POLICY, K_SEEN_B, K_L, K_I
local K_DUE, K_R
-- The crawl's per-host policies (see POLICIES), or false if none; nil
-- until load_policies has read them.
local HOST_POLICY
local OWNER, RETRY, CALL, LEASE_MS, DELAY_MS, CONCURRENCY, REFILL, WORST, FORCE, NBUF, ARG0
-- How much longer than its delay a host leased waits (see delayed_text in refill.lua).
local HOLD_MS = 0
-- How many prefetched requests the caller may hold after a top-up (see
-- conclude in refill.lua); 0: it takes none.
local TOPUP
-- Whether a call that leases fewer than it was asked to (nothing else was
-- ready) says in its reply when a pop may lease something (see conclude).
local SAY_WAIT
-- The prefetched requests' (id, token) pairs are ARGS[BUF0 + 1] on.
local BUF0
-- Server time in ms with its microseconds as a fraction, read once per call
-- and only when needed: host delays and ready times keep the fraction (in
-- scores and host records, both doubles), so a delay is never cut short by
-- rounding. Lease deadlines are whole ms (rounded down).
local NOW

local function now()
  if NOW == nil then
    local clock = redis.call('TIME')
    NOW = tonumber(clock[1]) * 1000 + tonumber(clock[2]) / 1000
  end
  return NOW
end

-- Per crawl (by key prefix), a lower bound of the earliest lease deadline,
-- of the earliest end of a host delay and of the earliest due time of a
-- scheduled request, in ms of server time: a pop skips the range reads of
-- reap(), wake() and promote() while nothing can be due (so a crawl with
-- nothing scheduled pays a table lookup per pop, and a ZRANGE a second). They live in
-- this server's Lua state, shared by every worker's calls; nil means
-- unknown (a new server, a reloaded library), so look. Only these functions
-- add leases or delayed hosts, and a removal keeps a lower bound low enough;
-- keys written behind their back (a restored dump, another crawlq version's
-- library) are seen within BOUND_MS, the furthest a bound is ever set ahead.
local BOUND = { expiry = {}, wake = {}, due = {} }
local BOUND_MS = 1000
local BOUND_KEYS = 0 -- entries made; past 10,000 (the scratch crawls of
-- self-checks add up), all are forgotten

local function set_bound(kind, value)
  local bounds = BOUND[kind]
  if bounds[P] == nil and value ~= nil then
    BOUND_KEYS = BOUND_KEYS + 1
    if BOUND_KEYS > 10000 then
      BOUND, BOUND_KEYS = { expiry = {}, wake = {}, due = {} }, 1
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
-- the only record of the queue's size (see meta above), so counting costs
-- no command. n_revisits moves meta `revisits` (refetches held in `due`).
local hosts, n_accepted, n_popped, n_released, n_expired, n_refetched, n_revisits
-- A cluster shard's last request number handed out in this call (meta idb),
-- when the call numbers requests after a floor (see add.lua); else nil.
local NUMBER
-- Ids whose lease ended in this call (their leases and lease records go in
-- one ZREM and one HDEL), and their payloads' ids in `p` (one HDEL).
local ended, freed

-- Key names by prefix, made once per crawl rather than once per call (each
-- concatenation makes a string, and strings made per call feed the GC).
local KEY_NAMES = {}
local KEY_NAMES_MADE = 0
-- Per crawl, {its `policy` hash as a table (HOST -> {delay ms or nil,
-- concurrency or nil}) or false when it is empty, the server time it was
-- read}: kept current by this node's control(), so pacing without host
-- policies costs a table lookup per call, and read again once it is
-- BOUND_MS old, since another node may have changed it (a cluster shard
-- moved away by a slot migration or a failover, and back).
local POLICIES = {}
-- The exact dedup's bucket state of the current call (see seen_state in seen.lua).
local SEEN

-- The call's key names (made once per crawl). The crawl's host policies
-- are unknown (HOST_POLICY nil) until load_policies: set_keys reads both.
local function use_keys(prefix)
  NOW = nil -- every call starts here: a new call, a new time
  SEEN = nil
  HOST_POLICY = nil
  if prefix == P then
    return -- the last call's crawl: its names are set
  end
  P = prefix
  local names = KEY_NAMES[P]
  if names == nil then
    names = { P .. 'meta', P .. 'seen', P .. 'bloom', P .. 'hosts', P .. 'ready',
      P .. 'delayed', P .. 'leases', P .. 'lease', P .. 'q:', P .. 'p', P .. 'accepted',
      P .. 'seen_at', P .. 'blocks', P .. 'policy', P .. 's:', P .. 'l:', P .. 'i:',
      P .. 'due', P .. 'r:' }
    KEY_NAMES_MADE = KEY_NAMES_MADE + 1
    if KEY_NAMES_MADE > 10000 then -- self-checks' scratch crawls add up
      KEY_NAMES, KEY_NAMES_MADE, POLICIES = {}, 1, {}
    end
    KEY_NAMES[P] = names
  end
  K_META, K_SEEN, K_BLOOM, K_HOSTS, K_READY, K_DELAYED, K_LEASES, K_LEASE, K_Q, K_P,
    K_ACCEPTED, K_SEEN_AT, K_BLOCKS, K_POLICY, K_SEEN_B, K_L, K_I, K_DUE, K_R = unpack(names)
end

-- The key format this library reads and writes (open.py FORMAT).
local FORMAT = '9'

-- Every open crawl's meta holds `format` (counters written since would not
-- bring it back). A call of a crawl that has no format, or another one,
-- fails instead of going on. No format: its keys vanished under its
-- workers (a server restarted without persistence, a FLUSHALL, a purge
-- while they ran), and an empty crawl would quietly have lost its queue
-- (CRAWLGONE: crawlq raises CorruptStore). Another: a newer crawlq
-- upgraded it in place while this one ran (CRAWLFORMAT: IncompatibleStore);
-- a newer format must therefore be written BOUND_MS before its layout
-- changes. Looked at when the policies are read (a restarted server's first
-- call, then once every BOUND_MS); the lean add and the counts look with
-- the meta fields they read anyway.
local function check_format(format)
  if format ~= FORMAT then
    if not format then
      error({ err = 'CRAWLGONE the keys of the crawl at ' .. P .. ' are gone' })
    end
    error({ err = 'CRAWLFORMAT ' .. format .. ': the crawl at ' .. P .. ' is in key format '
      .. format .. ', not ' .. FORMAT })
  end
end

-- The crawl's host policies into HOST_POLICY (see POLICIES): a table
-- lookup, and a TIME, per call; HGETALL once they are BOUND_MS old (and
-- then whether the crawl is still there).
local function load_policies()
  local cached = POLICIES[P]
  if cached == nil or now() - cached[2] > BOUND_MS then
    check_format(redis.call('HGET', K_META, 'format'))
    local policies = {}
    local flat = redis.call('HGETALL', K_POLICY)
    for i = 1, #flat, 2 do
      local delay, concurrency = string.match(flat[i + 1], '^(%S*) (%S*)$')
      policies[flat[i]] = { tonumber(delay), tonumber(concurrency) }
    end
    if next(policies) == nil then
      policies = false
    end
    cached = { policies, now() }
    POLICIES[P] = cached
  end
  HOST_POLICY = cached[1]
end

local function set_keys(prefix)
  use_keys(prefix)
  load_policies()
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

-- Small integers from text, by table lookup rather than number parsing.
local NUMBER_OF = {}

local function small_number(text)
  local n = NUMBER_OF[text]
  if n == nil then
    n = tonumber(text)
    if n < 4096 and n > -4096 then
      NUMBER_OF[text] = n
    end
  end
  return n
end

-- Move the meta counter `field` by n (no command when n is 0).
local function count_meta(field, n)
  if n ~= 0 then
    redis.call('HINCRBY', K_META, field, int_text(n))
  end
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

-- The earliest score of a sorted set, or math.huge if it is empty (or
-- holds only WIDE, scored +inf).
local function earliest(key)
  local first = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
  return first[2] and tonumber(first[2]) or math.huge
end

-- Up to 256 members of sorted set `key` whose score (a time in ms) has
-- come, or nil when the crawl's `kind` bound (see BOUND) says none can have.
local function due_now(kind, key)
  local bound = BOUND[kind][P]
  if bound ~= nil and bound > now() then
    return nil
  end
  return redis.call('ZRANGEBYSCORE', key, '-inf', now(), 'LIMIT', 0, 256)
end
