-- crawlq's Redis function library: scheduled requests, held in `due` until
-- their due time (an add's not_before, a release's delay, a refetch's
-- interval), for add.lua, ack_or_release.lua and take() in refill.lua.
-- Relies on shared.lua (key names, bounds, now, the call's counters),
-- hosts.lua (host, place), queues.lua (enqueue) and leases.lua (lease
-- records, end_lease, drop_ended, best_head).
--
-- A scheduled request is in no host's queue and counts in no host's leases,
-- so its host's pacing and concurrency ignore it; its payload waits in `p`
-- under its id. Once due, take() moves it into its host's queue in its
-- place (its id and score), as a released request goes back: promote()
-- moves at most 256 a call, a ZRANGEBYSCORE and a ZREMRANGEBYRANK for the
-- batch (O(log n) each in scheduled requests), then for each a bounded
-- number of commands whatever the depth of its lane (enqueue: the list's
-- end, front and first few entries, else a ZADD to r:HOST and a mark on
-- its host's head, O(log n); see queues.lua), and only when the crawl's
-- `due` bound says one may be due: a crawl with nothing scheduled pays a
-- table lookup per pop and a ZRANGE a second.

-- The member of `due` of request `id` of host `name` under score `score`
-- (its -priority, a number); a revisit is a refetch (counted apart).
local function due_member(id, score, name, revisit)
  return id .. (revisit and 'r' or 'w') .. int_text(score) .. ' ' .. name
end

-- Hold request `id` (its payload in `p` already) until `at` (ms of server time).
local function schedule(id, score, name, at, revisit)
  redis.call('ZADD', K_DUE, time_text(at), due_member(id, score, name, revisit))
  lower_bound('due', at)
  if revisit then
    n_revisits = n_revisits + 1
  end
end

-- Move the scheduled requests whose due time has come into their hosts'
-- queues (a bounded batch; the rest at the next calls).
local function promote()
  local due = due_now('due', K_DUE)
  if due == nil then
    return
  end
  local count = #due
  if count > 0 then
    local touched = {}
    for i = 1, count do
      local member = due[i]
      local id = string.sub(member, 1, 15)
      local score, name = string.match(member, '^(-?%d+) (.*)$', 17)
      local state = host(name)
      if enqueue(name, state, score, id, nil, 'due') then
        touched[name] = state -- a new head: the host's filing changes
      end
      if string.byte(member, 16) == 114 then -- 'r': a revisit
        n_revisits = n_revisits - 1
      end
    end
    redis.call('ZREMRANGEBYRANK', K_DUE, 0, count - 1)
    for name, state in pairs(touched) do
      place(name, state)
    end
    drop_ended() -- the payloads that enqueue moved from `p` into lists
  end
  set_bound('due', count < 256 and math.min(earliest(K_DUE), now() + BOUND_MS) or nil)
end

-- A new request number, as an add would take it now (a refetch joins the
-- end of its priority): the next of seq (which so counts refetches too, see
-- meta in shared.lua), or on a cluster shard the next after NUMBER (the
-- shard's numbers and the caller's floor, see add.lua).
local function take_number()
  local n = redis.call('HINCRBY', K_META, 'seq', 1)
  if NUMBER ~= nil then
    NUMBER = NUMBER + 1
    return NUMBER
  end
  return n
end

-- Ack the lease of request `id` (lease record `record`) and hold the same
-- request again for `delay` ms under a new number, with `payload` and
-- `score` as its payload and -priority when given (not ''). `lifo`: the
-- crawl's order (its new id counts down from the top). Returns its host.
local function refetch(id, record, delay, score, payload, lifo)
  local _, old_score, _, name = parse_lease(record)
  if score == '' then
    score = old_score
  end
  if payload == '' then
    payload = redis.call('HGET', K_P, id) or ''
  end
  end_lease(id, record, 'ack')
  n_refetched = n_refetched + 1
  local n = take_number()
  local new_id
  if lifo then
    new_id = string.format('%015d', 999999999999999 - n)
  else
    new_id = string.format('%015d', n)
  end
  score = tonumber(score)
  if delay > 0 then
    redis.call('HSET', K_P, new_id, payload)
    schedule(new_id, score, name, now() + delay, true)
  else -- due now: queued at once, at the end of its lane (the newest id)
    local state = host(name)
    if enqueue(name, state, score, new_id, payload, lifo and 'front' or 'tail') then
      place(name, state)
    end
  end
  return name
end

-- End the leases given as `count` (id, token, delay ms, score, payload)
-- tuples from ARGS[first] on. `refetching` (an ack): a tuple with a delay
-- acks and refetches its request (see refetch), one with delay '' is a plain
-- ack. Else (a release): each request goes back, with its payload and
-- score replaced unless '' (as release_updated does), held for its delay
-- when that is above 0. A stale token changes nothing. Returns what
-- end_leases returns.
local function finish_tuples(first, count, refetching)
  if count == 0 then
    return nil
  end
  local ids = {}
  for i = 1, count do
    ids[i] = ARGS[first + 5 * (i - 1)]
  end
  local records = redis.call('HMGET', K_LEASE, unpack(ids))
  local affected, done = {}, {}
  local lifo = nil
  for i = 1, count do
    local at = first + 5 * (i - 1)
    local id, record = ids[i], records[i]
    if record and not done[id] and lease_token(record) == ARGS[at + 1] then
      done[id] = true
      local delay, score, payload = tonumber(ARGS[at + 2]), ARGS[at + 3], ARGS[at + 4]
      if not refetching then
        if payload ~= '' then
          redis.call('HSET', K_P, id, payload)
          local token, rest = string.match(record, '^(%S+) %S+ (.*)$')
          record = token .. ' ' .. score .. ' ' .. rest
        end
        if delay ~= nil and delay > 0 then
          local _, held, _, name = parse_lease(record)
          affected[end_lease(id, record, 'hold')] = true
          schedule(id, tonumber(held), name, now() + delay, false)
        else
          affected[end_lease(id, record, 'release')] = true
        end
      elseif delay == nil then
        affected[end_lease(id, record, 'ack')] = true
      else
        if lifo == nil then
          lifo = redis.call('HGET', K_META, 'lifo') == '1'
        end
        affected[refetch(id, record, delay, score, payload, lifo)] = true
      end
    end
  end
  drop_ended()
  return best_head(affected)
end
