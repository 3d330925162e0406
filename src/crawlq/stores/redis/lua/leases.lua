-- crawlq's Redis function library: lease records (`lease`) and the end of
-- a lease (ack, release, expiry, unpop, hold). Relies on shared.lua (key names,
-- the call's counters, chunked), hosts.lua (host, place) and queues.lua
-- (enqueue).

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

-- End the lease of request `id`: 'ack' finishes it; 'release' and 'expire'
-- put it back in its place; 'hold' is a release whose request the caller
-- schedules (due.lua: its payload stays in `p`); 'unpop' puts back a
-- prefetched request that was never handed out, and also undoes the host
-- delay its pop started (the host was ready before that pop, so "ready
-- since 0" is the same as before).
local function end_lease(id, record, how)
  local _, score, set, name = parse_lease(record)
  local state = host(name)
  state.leased = math.max(0, state.leased - 1)
  if how == 'ack' then
    freed[#freed + 1] = id
  elseif how == 'hold' then
    n_released = n_released + 1
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

-- The best head score among the hosts in `affected` (name -> true), or nil.
local function best_head(affected)
  local best = nil
  for name in pairs(affected) do
    local head = hosts[name].head_score
    if head ~= nil and (best == nil or head < best) then
      best = head
    end
  end
  return best
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
  return best_head(affected)
end

-- Release the leases given as `count` (id, token, score, payload) quads
-- from ARGS[first] on, each request going back with its stored payload
-- replaced and filed under `score` (its new -priority) with its own id, so
-- it keeps its place among its priority; an empty payload: a plain release.
-- A stale token changes nothing, update included. Returns what end_leases
-- returns.
local function release_updated(first, count)
  if count == 0 then
    return nil
  end
  local ids = {}
  for i = 1, count do
    ids[i] = ARGS[first + 4 * (i - 1)]
  end
  local records = redis.call('HMGET', K_LEASE, unpack(ids))
  local affected, done = {}, {}
  for i = 1, count do
    local at = first + 4 * (i - 1)
    local id, record = ids[i], records[i]
    if record and not done[id] and lease_token(record) == ARGS[at + 1] then
      done[id] = true
      if ARGS[at + 3] ~= '' then
        redis.call('HSET', K_P, id, ARGS[at + 3])
        local token, rest = string.match(record, '^(%S+) %S+ (.*)$')
        record = token .. ' ' .. ARGS[at + 2] .. ' ' .. rest
      end
      affected[end_lease(id, record, 'release')] = true
    end
  end
  drop_ended()
  return best_head(affected)
end
