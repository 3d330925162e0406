-- Read-only views of a frontier, and forget. Relies on shared.lua
-- (set_keys) and seen.lua. keys[1] = "crawlq:{NAME}:".
-- args[1] = 'counts': returns {queued, leased, seen, accepted, duplicates,
--   capped, popped, released, expired, refetched} (crawlq.Counters), then
--   scheduled, revisits and microseconds until the first scheduled request
--   is due (-1: none), as due_figures() counts them (a request whose due
--   time has come is queued, moved by a pop or not yet); args[2] is
--   'bloom' when seen is counted in meta,
--   'timed' when by `seen_at` (seen_ttl), else by the exact dedup (its
--   buckets' count, or the `seen` set's size).
-- args[1] = 'due': returns {scheduled, revisits, microseconds until the
--   first is due (-1: none)} (due_figures), for readers from outside.
-- args[1] = 'wait': microseconds until a pop may lease something: 0 now, -1
--   when nothing is queued, leased or scheduled (only an add can make a
--   request ready). A scheduled request counts from its due time.
-- args[1] = 'seen', args[2] = 'bloom', 'exact' or 'timed', args[3] Bloom
--   bits (timed: seen_ttl in ms, 0 forever), args[4] Bloom hashes, then
--   16-byte fingerprints: returns 1 (seen) or 0 for each, checked as add.lua
--   checks them.
local function seen(P, args)
  local out = {}
  if args[2] == 'timed' then
    local ttl = tonumber(args[3])
    local clock = redis.call('TIME')
    local now = tonumber(clock[1]) * 1000 + tonumber(clock[2]) / 1000
    for i, at in ipairs(redis.call('HMGET', P .. 'seen_at', unpack(args, 5))) do
      out[i] = (at and (ttl == 0 or now - tonumber(at) < ttl)) and 1 or 0
    end
    return out
  end
  if args[2] ~= 'bloom' then
    for i = 5, #args do
      out[#out + 1] = seen_has(args[i]) and 1 or 0
    end
    return out
  end
  local bits, hashes = tonumber(args[3]), tonumber(args[4])
  for i = 5, #args do
    out[#out + 1] = bloom_has(args[i], bits, hashes) and 1 or 0 -- (K_BLOOM is P .. 'bloom')
  end
  return out
end

-- Requests due whose revisits due_figures() tells apart, at most.
local DUE_LOOK = 1024

-- The crawl's scheduled requests: those whose due time is still to come by
-- the server's clock (one whose time has come is queued, even before a pop
-- moves it into its host), the revisits among them, and microseconds until
-- the first of them (-1: none). A ZCOUNT and a ZRANGE by score, O(log n) in
-- scheduled requests, and a look at the revisits among those due now but
-- not moved (meta `revisits` counts every refetch in `due`): at most
-- DUE_LOOK of them (a pop moves 256); past that many, revisits is the
-- count less those among the first DUE_LOOK, at most scheduled.
local function due_figures(P, revisits)
  local key = P .. 'due'
  local clock = redis.call('TIME')
  local now = tonumber(clock[1]) * 1000 + tonumber(clock[2]) / 1000
  local after = '(' .. time_text(now)
  local later = redis.call('ZCOUNT', key, after, '+inf')
  if later == 0 then
    return 0, 0, -1
  end
  local first = redis.call('ZRANGE', key, after, '+inf', 'BYSCORE', 'LIMIT', 0, 1, 'WITHSCORES')
  local due_in = math.max(0, math.ceil((tonumber(first[2]) - now) * 1000))
  if revisits > 0 then
    local come = redis.call('ZRANGE', key, '-inf', time_text(now), 'BYSCORE', 'LIMIT', 0,
      DUE_LOOK)
    for _, member in ipairs(come) do
      if string.byte(member, 16) == 114 then -- 'r': a revisit
        revisits = revisits - 1
      end
    end
  end
  return later, math.max(0, math.min(revisits, later)), due_in
end

local function read(keys, args)
  local P = keys[1]
  set_keys(P)
  if args[1] == 'seen' then
    return seen(P, args)
  end
  if args[1] == 'wait' then
    return wait_us() -- (refill.lua)
  end
  local m = redis.call('HMGET', P .. 'meta', 'queued', 'accepted', 'popped', 'released',
    'expired', 'seq', 'seq0', 'capped', 'refetched', 'revisits', 'format')
  check_format(m[11]) -- (at once: counts of nothing would say the crawl is done)
  for i = 1, 10 do
    m[i] = tonumber(m[i] or '0')
  end
  if args[1] == 'due' then
    return { due_figures(P, m[10]) }
  end
  -- Requests in hosts' queues or in `due`.
  local held = m[1] + m[2] + m[9] - m[3] + m[4] + m[5]
  if args[1] == 'counts' then
    local leased = redis.call('ZCOUNT', P .. 'leases', '-inf', '(inf') -- (not WIDE)
    local scheduled, revisits, due_in = due_figures(P, m[10])
    local seen
    if args[2] == 'bloom' then
      seen = tonumber(redis.call('HGET', P .. 'meta', 'seen') or '0')
    elseif args[2] == 'timed' then
      seen = redis.call('HLEN', P .. 'seen_at')
    else
      seen = seen_count()
    end
    -- Counters: accepted, duplicates (every request offered was accepted,
    -- capped or a duplicate; seq also counts refetches), capped, popped,
    -- released, expired, refetched.
    return { held - scheduled, leased, seen, m[2], m[6] - m[7] - m[2] - m[8] - m[9], m[8],
      m[3], m[4], m[5], m[9], scheduled, revisits, due_in }
  end
end

-- forget: drop fingerprints from the exact dedup (the buckets, or the `seen`
-- set of a crawl from before format 5). keys[1] = "crawlq:{NAME}:", args:
-- 16-byte fingerprints. Returns how many were there.
local function forget(keys, args)
  set_keys(keys[1])
  local removed = 0
  for i = 1, #args do
    if seen_remove(args[i]) then
      removed = removed + 1
    end
  end
  seen_save()
  return removed
end
