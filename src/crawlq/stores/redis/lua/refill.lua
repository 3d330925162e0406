-- crawlq's Redis function library: the frame of a changing call (add.lua,
-- pop.lua, ack_or_release.lua): begin reads the common arguments and hands
-- a retry the outcome its first run recorded (replayed); take leases the
-- next requests in order, after reap (expired leases), wake (hosts whose
-- delay ended) and promote (scheduled requests now due, due.lua); conclude gives prefetched requests back when needed,
-- refills, saves and records the outcome for a retry. Relies on shared.lua,
-- hosts.lua, queues.lua, leases.lua and due.lua.
--
-- Arguments common to every changing function (its own ones follow):
--   1 owner  2 call number (prefixed 'r' when the call is a retry)
--   3 a header packed big-endian (one argument: a struct.unpack, where six
--     arguments cost six tonumber calls): lease_timeout ms (double),
--     host_delay us (double), host_concurrency (uint32, 0: no limit), how
--     many prefetched requests the caller wants to hold after the call
--     (uint32, those it sends that stay count), the score of its last
--     prefetched request (double), flags (byte: 1 give the prefetched
--     requests back whatever happens, 2 that score is there: some are held,
--     4 say when a pop may lease something if fewer are leased than asked),
--     how many a top-up may leave held (uint32, 0: no top-up; the caller
--     merges, see conclude), n prefetched requests (uint32), the hold in
--     us (uint32: a host leased keeps its delay plus this, the time its
--     request may wait in the worker before it goes out; Policy.hold)
--   then n (id, token) pairs
-- A changing function returns {flags, returned, id, token, host, payload, ...}:
-- flags is add's outcome per request ('1' added, '0' duplicate), then on a
-- cluster shard ':' and the shard's new number mark (an add's, or a
-- refetching ack's: see "Ids across shards" in add.lua); returned is
-- 1 when the prefetched requests were given back (the leased ones that follow
-- replace them), 0 when they stay (the leased ones that follow, if any, come
-- after them), 2 when they stay and the caller merges the leased ones that
-- follow in by priority, then id (a top-up, see conclude). With flag 4, a
-- call that leased fewer than it was asked to (nothing else was ready) adds
-- 4 to returned and puts wait_us() right after it, before the leased ones.

-- A retried call whose first run completed: that run's outcome, else nil.
local function replayed()
  if not RETRY then
    return nil
  end
  local last = redis.call('HGET', K_LEASE, '@' .. OWNER)
  if last == false then
    return nil
  end
  local call, flags, returned, taken = string.match(last, '^(%d+)\n([01]*:?%d*)\n([012])\n(.*)$')
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

-- The start of every changing call: the common arguments (above) become the
-- call's context. Returns what replayed() returns: a retried call whose
-- first run completed gets that run's outcome, to return as it is.
local function begin(keys, args)
  ARGS = args
  set_keys(keys[1])
  OWNER = args[1]
  RETRY = string.byte(args[2], 1) == 114 -- 'r'
  CALL = string.match(args[2], '%d+')
  local worst, flags
  LEASE_MS, DELAY_MS, CONCURRENCY, REFILL, worst, flags, TOPUP, NBUF, HOLD_MS =
    struct.unpack('>ddI4I4dBI4I4I4', args[3])
  DELAY_MS, HOLD_MS = DELAY_MS / 1000, HOLD_MS / 1000 -- sent in microseconds
  FORCE = flags % 2 == 1
  WORST = flags % 4 >= 2 and worst or nil
  SAY_WAIT = flags >= 4
  BUF0 = 3
  ARG0 = 3 + 2 * NBUF
  hosts, n_accepted, n_popped, n_released, n_expired, n_refetched, n_revisits =
    {}, 0, 0, 0, 0, 0, 0
  ended, freed, NUMBER = {}, {}, nil
  return replayed()
end

-- Expired leases come back by themselves: every pop first puts them back.
local function reap()
  local expired = due_now('expiry', K_LEASES)
  if expired == nil then
    return
  end
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
  local due = due_now('wake', K_DELAYED)
  if due == nil then
    return
  end
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
-- records to `records`, for the caller to write. Returns how many it leased.
--
-- Hosts are taken from `ready` a round at a time (one ZPOPMIN for many), and
-- re-filed with their next head in one ZADD at the end of the round. That is
-- the order of one-at-a-time pops as long as no re-filed host sorts before
-- the round's last host; one that does is merged into the rest of the round
-- at its place instead. What the round does not use goes back.
local function take(n, out, taken, records)
  if n <= 0 then
    return 0
  end
  reap()
  wake()
  promote()
  local deadline = math.floor(now()) + LEASE_MS
  local deadline_text = int_text(deadline)
  local token_prefix = OWNER .. ':' .. CALL .. '.'
  -- A host's delay starts at its lease and lasts HOLD_MS more: the time the
  -- request may wait in the worker (prefetched, leased ahead) before it
  -- goes out, so that the next lease of the host comes a delay after that.
  local delayed_text = DELAY_MS > 0 and micros_text(NOW + DELAY_MS + HOLD_MS)
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
    -- The wide member (score +inf) comes last: every ready host is taken.
    local wide = count > 0 and round[2 * count - 1] == WIDE
    if wide then
      count = count - 1
    end
    if count == 0 then
      if wide then
        redis.call('ZADD', K_READY, 'inf', WIDE)
      end
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
          delay = policy_of(name, 1, DELAY_MS)
        end
        if delay > 0 then
          state.ready = NOW + delay + HOLD_MS
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
    if wide then
      later[#later + 1] = 'inf'
      later[#later + 1] = WIDE
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
  return got
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
  local call, taken = string.match(last, '^(%d+)\n[01]*:?%d*\n[012]\n(.*)$')
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

-- The caller's prefetched requests: their ids, and their lease records
-- (false for one that is no longer leased).
local function held_leases()
  local ids = {}
  for i = 1, NBUF do
    ids[i] = ARGS[BUF0 + 2 * i - 1]
  end
  return ids, redis.call('HMGET', K_LEASE, unpack(ids))
end

-- Whether a top-up keeps each host's order: a host whose head now comes
-- before its held request (a better add, one that came back, an add in
-- LIFO order) is fine when the top-up leases that head (ready, and of a
-- higher priority than the last held request: it is merged in first), and
-- needs the batch given back otherwise (at its concurrency limit, delayed,
-- or of the last held request's priority).
local function held_stay_first()
  local ids, records = held_leases()
  for i = 1, NBUF do
    if records[i] and lease_token(records[i]) == ARGS[BUF0 + 2 * i] then
      local _, text, _, name = parse_lease(records[i])
      local score, state = tonumber(text), host(name)
      local head = state.head_score
      if head and (head < score or (head == score and state.head_id < ids[i]))
          and not (state.flag == FLAG_R and head < WORST) then
        return false
      end
    end
  end
  return true
end

-- Microseconds until a pop may lease something: 0 now, -1 when nothing is
-- queued, leased or scheduled (only an add can make a request ready). A
-- host waiting out its delay counts from its ready time, one at its
-- concurrency limit from its first lease's deadline (an ack may come
-- sooner), a scheduled request from its due time. For read('wait') and a
-- call that leased fewer than asked (conclude).
local function wait_us()
  if redis.call('ZCOUNT', K_READY, '-inf', '(inf') > 0 then
    return 0
  end
  local soonest = nil
  for _, key in ipairs({ K_DELAYED, K_LEASES, K_DUE }) do
    local first = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
    if first[2] then
      local at = tonumber(first[2])
      if at < math.huge and (soonest == nil or at < soonest) then -- (WIDE: +inf)
        soonest = at
      end
    end
  end
  if soonest ~= nil then
    return math.max(0, math.ceil((soonest - now()) * 1000))
  end
  -- Filed nowhere: nothing held, or requests queued all the same (a pop
  -- sorts them out). Held: queued at open, accepted and refetched since,
  -- less popped, plus what came back.
  local m = redis.call('HMGET', K_META, 'queued', 'accepted', 'refetched', 'popped', 'released',
    'expired')
  local held = 0
  for i = 1, 6 do
    local n = tonumber(m[i] or '0')
    held = held + (i == 4 and -n or n)
  end
  return held > 0 and 0 or -1
end

-- The common end of a changing script: give the caller's prefetched requests
-- back if this call may have changed what comes before them (a request at
-- least as good as the last prefetched one became ready: `best` is the best
-- such score), lease the refill, save, and remember the outcome for a retry.
-- Prefetched requests that stay are followed by what is leased now: nothing
-- that became ready in this caller's calls comes before them (it would have
-- given them back), so the order stays exact for one worker.
--
-- A top-up instead, for a caller that merges by priority then id (TOPUP >
-- 0: one whose ack_delay already makes the order between hosts of one
-- priority approximate): what has a higher priority than its last
-- prefetched request is leased on top of what it holds, as long as it then
-- holds at most TOPUP and each held request still comes first among its
-- host's (held_stay_first). Priority order and first-in-first-out (or
-- last-in-first-out) within a host stay exact; what it saves is giving
-- back and leasing again (on a 16-shard cluster, a request a page).
--
-- A caller that said its pops follow (SAY_WAIT) and got fewer than it
-- asked for hears when a pop may lease again (wait_us): its next pop and
-- its next look at the wait need no call of their own.
local function conclude(flags, best)
  local out, taken, records = { flags, 0 }, {}, {}
  local asked, got = 0, 0
  give_back_lost()
  local back = NBUF > 0 and (FORCE or (best ~= nil and WORST ~= nil and best <= WORST))
  local ahead = nil
  if back and TOPUP > NBUF and not FORCE then
    reap() -- (what ends or wakes now counts among what comes first)
    wake()
    promote()
    -- (one of the last held request's priority comes after it by id, or is
    -- of another host: the order between hosts of one priority is bent)
    ahead = redis.call('ZCOUNT', K_READY, '-inf', '(' .. int_text(WORST))
    if NBUF + ahead > TOPUP or not held_stay_first() then
      ahead = nil -- given back, as without a top-up
    end
  end
  if ahead then
    out[2] = 2
    asked = ahead + math.max(REFILL - NBUF, 0)
    got = take(asked, out, taken, records)
  elseif back then
    out[2] = 1
    local ids, held = held_leases()
    for i = 1, NBUF do
      if held[i] and lease_token(held[i]) == ARGS[BUF0 + 2 * i] then
        end_lease(ids[i], held[i], 'unpop')
      end
    end
    drop_ended()
    asked = REFILL
    got = take(asked, out, taken, records)
  else
    asked = REFILL - NBUF -- (nothing to take when NBUF >= REFILL)
    got = take(asked, out, taken, records)
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
  if SAY_WAIT and got < asked then
    -- Nothing else was ready: the caller's next pop need not ask again.
    out[2] = out[2] + 4
    table.insert(out, 3, wait_us())
  end
  return out
end
