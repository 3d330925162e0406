-- add_links: the lean add, for a call that carries only links. The store
-- calls it instead of add when the call has no lease to end, nothing to
-- lease after it (beyond the prefetched requests held) and no unanswered
-- call whose leases to give back (see RedisStore._lean in store.py): then
-- add's frame (begin, conclude: the common arguments, give-backs, take,
-- the counters of every kind, the replay record of every call) mostly has
-- nothing to do. The links get what add gives them (add_entries in
-- add.lua: dedup in every mode, caps, due times, ids, host queues and
-- filing); the frame is a packed header, the meta fields in one HMGET and
-- one HSET, and a replay record only when a retry would otherwise differ.
-- Only when a link accepted comes before the caller's last prefetched
-- request does the call end as add does (conclude: the prefetched requests
-- go back, as many are leased afresh). Relies on add.lua (add_entries),
-- refill.lua (replayed, conclude) and the parts before them.
--
-- keys[1] = "crawlq:{NAME}:". Arguments:
--   1 owner  2 call number (prefixed 'r' when the call is a retry)
--   3 header, struct '>BI4I4BI4I4ddI4' (calls.py LINKS_HEADER): flags (1
--     lifo, 2 numbered for a cluster shard, 4 due times follow, 8 dedup
--     by seen_ttl, 16 prefetched requests held), host_concurrency (0:
--     none), Bloom bits (0: exact dedup), Bloom hashes, count,
--     max_requests_per_host (0: no cap), seen_ttl in ms (0: forever),
--     floor, span
--   4 the entries, packed as add's (see add.lua)
--   then, when numbered, the entries' offsets (see "Ids across shards" in
--   add.lua); when due times follow, their blob (as add's); when the
--   header's flag 16 says prefetched requests are held, struct '>ddI4I4dI4I4'
--   (lease_timeout ms, host_delay us, how many to hold after the call, n
--   held, the score of the last of them, how many it may hold after a
--   top-up: 0 none, see conclude; the hold us, see begin), then their n
--   (id, token) pairs.
-- Returns add's outcome alone, as a string: '1' added, '0' not, per entry,
-- then on a cluster shard ':' and the shard's new number mark; or, when
-- the prefetched requests went back or were topped up, what add returns
-- (see refill.lua).
--
-- A call whose reply is lost is retried with the same number. A first run
-- that accepted or capped a request left its outcome in the owner's
-- replay record (lease '@' .. owner, the format conclude writes, so
-- begin's replayed and give_back_lost read it as theirs), which the retry
-- returns; one that did neither changed nothing a rerun would see but
-- meta seq, so the retry runs again: the same outcome, and its links
-- counted as offered twice (duplicates).
local function add_links(keys, args)
  ARGS = args
  use_keys(keys[1])
  OWNER = args[1]
  local number = args[2]
  RETRY = string.byte(number, 1) == 114 -- 'r'
  if RETRY then
    CALL = string.sub(number, 2)
    local replay = replayed()
    if replay then
      if replay[2] == 1 or replay[3] then
        return replay -- (its first run gave back and leased: conclude's reply)
      end
      return replay[1]
    end
  else
    CALL = number
  end
  local flags, count, bits, hashes, cap, ttl, floor, span
  flags, CONCURRENCY, bits, hashes, count, cap, ttl, floor, span =
    struct.unpack('>BI4I4BI4I4ddI4', args[3])
  hosts, n_accepted, n_popped, n_released, n_expired, n_refetched, n_revisits =
    {}, 0, 0, 0, 0, 0, 0
  -- (ended, freed: no lease ends here but in conclude)
  NUMBER, NBUF, TOPUP, HOLD_MS = nil, 0, 0, 0
  local numbered, offsets, dues = flags % 4 >= 2, nil, nil
  local at = 5
  if numbered then
    offsets, at = args[at], at + 1
  end
  if flags % 8 >= 4 then
    dues, at = args[at], at + 1
  end
  if flags % 16 < 8 then
    ttl = nil
  end
  if flags >= 16 then
    -- Prefetched requests held: what conclude needs, should it give them back.
    LEASE_MS, DELAY_MS, REFILL, NBUF, WORST, TOPUP, HOLD_MS =
      struct.unpack('>ddI4I4dI4I4', args[at])
    -- (delay and hold sent in microseconds)
    DELAY_MS, HOLD_MS, FORCE, BUF0 = DELAY_MS / 1000, HOLD_MS / 1000, false, at
    SAY_WAIT = false
  end
  -- What meta holds that this call needs: the dedup's bucket state (exact
  -- dedup; its count is not read, see seen_count_added) and a shard's
  -- number mark, in one command.
  -- (And `format`: whether the crawl is still there as it was, see check_format.)
  local base = nil
  if bits == 0 and ttl == nil then
    if numbered then
      local m = redis.call('HMGET', K_META, 'sl', 'sp', 'sw', 'format', 'idb')
      check_format(m[4])
      seen_read(m[1], m[2], nil, m[3])
      base = tonumber(m[5] or '0')
    else
      local m = redis.call('HMGET', K_META, 'sl', 'sp', 'sw', 'format')
      check_format(m[4])
      seen_read(m[1], m[2], nil, m[3])
    end
  else
    local m = redis.call('HMGET', K_META, 'format', 'idb')
    check_format(m[1])
    base = numbered and tonumber(m[2] or '0') or nil
  end
  if numbered then
    base = math.max(base, floor)
  end
  -- Ids as add takes them (seq also counts every request offered).
  local seq = redis.call('HINCRBY', K_META, 'seq', count) - count
  local outcome, best, capped, new_seen = add_entries(args[4], count, flags % 2 == 1, bits,
    hashes, cap, ttl, seq, base, offsets, dues)
  local fields = nil
  if numbered then
    local mark = string.format('%d', base + span)
    outcome = outcome .. ':' .. mark
    if n_accepted > 0 then -- (no id taken, no mark to move)
      fields = { 'idb', mark }
    end
  end
  if SEEN then
    seen_count_added(fields)
  elseif fields then
    redis.call('HSET', K_META, unpack(fields))
  end
  if new_seen ~= 0 then
    count_meta('seen', new_seen)
  end
  if capped ~= 0 then
    count_meta('capped', capped)
  end
  if NBUF > 0 and best ~= nil and best <= WORST then
    -- A link comes before the last prefetched request: add's end, which
    -- gives them back and leases afresh (and records it all for a retry).
    if HOST_POLICY == nil then
      load_policies()
    end
    ended, freed = {}, {}
    return conclude(outcome, best)
  end
  save_hosts()
  if n_accepted > 0 then
    count_meta('accepted', n_accepted)
  end
  if n_accepted > 0 or capped > 0 then
    redis.call('HSET', K_LEASE, '@' .. OWNER, CALL .. '\n' .. outcome .. '\n0\n')
  end
  return outcome
end
