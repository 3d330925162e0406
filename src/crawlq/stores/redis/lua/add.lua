-- add: dedup and enqueue a batch, then ack the leases it finishes, atomically
-- (a page's links, then the page: children first). The batch's part is
-- add_entries, which add_links (links.lua, the lean add of a call that
-- carries only links) shares. Relies on refill.lua, due.lua, leases.lua,
-- queues.lua, hosts.lua, seen.lua and shared.lua.
-- Arguments after the common ones: lifo ('1'/'0'), Bloom bits (0: exact dedup),
-- Bloom hashes, count, then one blob of entries, each packed big-endian as
-- 16-byte fingerprint, flags byte (bit 0: dont_filter), int32 priority,
-- uint32 length + host, uint32 length + encoded request; then
-- max_requests_per_host (0: no cap), seen_ttl in ms ('' : dedup by the `seen`
-- set; a number: by `seen_at`, 0 meaning forever), the number of leases to
-- ack and their (id, token) pairs, or 'f' .. that number and their (id,
-- token, delay ms, score, payload) tuples when some refetch (see
-- finish_tuples in due.lua); then, from a cluster crawl's shard (or '' three
-- times), a floor, offsets and a span (see "Ids across shards" below); then,
-- only when some entry has a due time, a blob of (uint32 entry number from
-- 1, double due time in ms of server time) pairs: an entry whose due time
-- is still to come is scheduled (due.lua) rather than queued.
--
-- A refetch takes its new number after the batch's (see take_number).
--
-- Ids across shards. Each shard numbers its own adds, so numbers of two
-- shards would say nothing about which request came first. A cluster
-- worker sends a floor (the highest number it knows of, in any shard), the
-- place of each entry in its whole batch (uint32 each, packed) and the
-- batch's size: entry i is numbered base + offset + 1, with base the larger
-- of the floor and the shard's own next number (meta idb), which becomes
-- base + span. One worker's ids then grow in the order it added, across
-- shards; the reply's flags end with ':' and base + span, its new floor.

-- Whether a fingerprint counts as seen now, without recording it: for an
-- add refused by the cap, which counts as capped only when it is no duplicate.
local function seen_now(fingerprint, bloom_bits, bloom_hashes, ttl)
  if ttl ~= nil then
    local at = redis.call('HGET', K_SEEN_AT, fingerprint)
    return at ~= false and (ttl == 0 or now() - tonumber(at) < ttl)
  end
  if bloom_bits == 0 then
    return seen_has(fingerprint)
  end
  return bloom_has(fingerprint, bloom_bits, bloom_hashes)
end

-- Dedup and queue (or schedule) the `count` entries packed in `blob` (see
-- the arguments above), for add and add_links (links.lua). `lifo`: the
-- batch's order; `bloom_bits` (0: exact dedup) and `bloom_hashes`; `cap`
-- (max_requests_per_host, 0: none); `ttl`: seen_ttl in ms (nil: none);
-- `seq`: the number before the batch's first (meta seq less count), unless
-- `base` (a cluster shard's numbering, with `offsets`); `dues`: the blob of
-- due times, or nil. Counts the accepted in n_accepted and files the hosts
-- whose head changed. Returns the outcome per entry ('1' added, '0' not),
-- the best score queued ready (nil if none), how many were capped, and how
-- many fingerprints the Bloom filter newly holds.
local function add_entries(blob, count, lifo, bloom_bits, bloom_hashes, cap, ttl, seq, base,
    offsets, dues)
  -- Due times by entry number, when the batch has any.
  local DUES = nil
  local held, held_payloads, held_first = nil, nil, nil
  if dues and dues ~= '' then
    DUES, held, held_payloads = {}, {}, {}
    local at = 1
    while at <= #dues do
      local index, due
      index, due, at = struct.unpack('>Id', dues, at)
      DUES[index] = due
    end
  end
  local new_seen = 0
  local flags, touched = {}, nil
  local where = lifo and 'front' or 'tail'
  -- With a cap: requests accepted per host in this call, and each host's count before it.
  local accepted, before = nil, nil
  if cap > 0 then
    accepted, before = {}, {}
  end
  local capped = 0
  local best = nil
  local pos = 1
  for i = 1, count do
    local fingerprint, bits, priority, name, payload
    fingerprint, bits, priority, name, payload, pos = struct.unpack('>c16Bi4I4c0I4c0', blob, pos)
    local new = true
    local full = false
    if cap > 0 then
      local had = before[name]
      if had == nil then
        had = tonumber(redis.call('HGET', K_ACCEPTED, name) or '0')
        before[name] = had
      end
      full = had + (accepted[name] or 0) >= cap
    end
    if full then
      new = false
      if bits % 2 == 1 or not seen_now(fingerprint, bloom_bits, bloom_hashes, ttl) then
        capped = capped + 1
      end
    elseif bits % 2 == 0 then
      if ttl ~= nil then
        local at = redis.call('HGET', K_SEEN_AT, fingerprint)
        new = at == false or (ttl > 0 and now() - tonumber(at) >= ttl)
        if new then
          redis.call('HSET', K_SEEN_AT, fingerprint, string.format('%d', math.floor(now())))
        end
      elseif bloom_bits == 0 then
        new = seen_add(fingerprint)
      else
        -- The fingerprint was seen (or is a false positive) if all its bits
        -- were set already.
        new = bloom_add(fingerprint, bloom_bits, bloom_hashes)
        if new then
          new_seen = new_seen + 1
        end
      end
    end
    if new then
      if cap > 0 then -- (a table update per request: a fiftieth of an add)
        accepted[name] = (accepted[name] or 0) + 1
      end
      local n
      if base then
        n = base + struct.unpack('>I4', offsets, 4 * i - 3) + 1
      else
        seq = seq + 1
        n = seq
      end
      local id
      if lifo then
        id = string.format('%015d', 999999999999999 - n)
      else
        id = string.format('%015d', n)
      end
      local score = 0 - priority
      n_accepted = n_accepted + 1
      local due = DUES and DUES[i]
      if due and due > now() then
        -- Scheduled: one ZADD and one HSET for all of the batch's, below.
        held[#held + 1] = time_text(due)
        held[#held + 1] = due_member(id, score, name, false)
        held_payloads[#held_payloads + 1] = id
        held_payloads[#held_payloads + 1] = payload
        if held_first == nil or due < held_first then
          held_first = due
        end
      else
        local state = host(name)
        if enqueue(name, state, score, id, payload, where) then
          -- A new head: the host's filing changes.
          touched = touched or {}
          touched[name] = state
        end
        if best == nil or score < best then
          best = score
        end
      end
      flags[i] = '1'
    else
      flags[i] = '0'
    end
  end
  if touched then
    if HOST_POLICY == nil then
      load_policies() -- (add_links reads them only when a host is filed)
    end
    for name, state in pairs(touched) do
      place(name, state)
    end
  end
  if held_first ~= nil then
    chunked('HSET', K_P, held_payloads, 2)
    chunked('ZADD', K_DUE, held, 2)
    lower_bound('due', held_first)
  end
  -- With a cap, each host's accepted count, exactly: one HSET however many
  -- hosts the batch has (their counts before it were read above). Without
  -- one the count is for stats only, and the workers send theirs once a
  -- second (RedisStore._send_host_accepted): it would cost a command per
  -- host per call here, a sixth of an add.
  if cap > 0 then
    local counts = {}
    for name, n in pairs(accepted) do
      counts[#counts + 1] = name
      counts[#counts + 1] = int_text(before[name] + n)
    end
    if #counts > 0 then
      chunked('HSET', K_ACCEPTED, counts, 2)
    end
  end
  return table.concat(flags), best, capped, new_seen
end

local function add(keys, args)
  local replay = begin(keys, args)
  if replay then
    return replay
  end
  local COUNT = tonumber(args[ARG0 + 4])
  -- Ids for the whole batch at once; those of duplicates stay unused (ids
  -- only need to grow). seq also counts every request offered (counters).
  local seq = redis.call('HINCRBY', K_META, 'seq', args[ARG0 + 4]) - COUNT
  local FINISH = tonumber(args[ARG0 + 8]) -- nil: 'fN', refetches among them
  local STRIDE = 2
  if FINISH == nil then
    FINISH, STRIDE = tonumber(string.sub(args[ARG0 + 8], 2)), 5
  end
  local tail = ARG0 + 9 + STRIDE * FINISH
  local FLOOR, base = tonumber(args[tail] or ''), nil
  if FLOOR then
    base = math.max(tonumber(redis.call('HGET', K_META, 'idb') or '0'), FLOOR)
  end
  local outcome, best, capped, new_seen = add_entries(args[ARG0 + 5], COUNT,
    args[ARG0 + 1] == '1', tonumber(args[ARG0 + 2]), tonumber(args[ARG0 + 3]),
    tonumber(args[ARG0 + 6]), tonumber(args[ARG0 + 7]), seq, base, args[tail + 1],
    args[tail + 3])
  count_meta('seen', new_seen)
  seen_save()
  count_meta('capped', capped)
  if FLOOR then
    NUMBER = base + tonumber(args[tail + 2])
  end
  local acked
  if STRIDE == 5 then
    acked = finish_tuples(ARG0 + 9, FINISH, true)
  else
    acked = end_leases(ARG0 + 9, FINISH, 'ack')
  end
  if acked ~= nil and (best == nil or acked < best) then
    best = acked
  end
  if FLOOR then
    local mark = string.format('%d', NUMBER)
    redis.call('HSET', K_META, 'idb', mark)
    outcome = outcome .. ':' .. mark
  end
  return conclude(outcome, best)
end

-- probe: add for the self-check's scratch crawl (calls.py), which no open
-- made: its meta gets a `format` first, so its calls find the crawl there
-- (see check_format in shared.lua).
local function probe(keys, args)
  redis.call('HSET', keys[1] .. 'meta', 'format', FORMAT)
  return add(keys, args)
end
