-- crawlq's Redis function library: a host's queued requests, in its lists
-- l:LANE:HOST and index i:HOST (or alone in `p`): enqueue and dequeue keep
-- a host record's head current. Relies on shared.lua (key names, freed,
-- int_text).

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

-- The lane of a request (see l:LANE:HOST in shared.lua) from its score and id.
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
-- place by id ('back', a request coming back; 'due', a scheduled request
-- coming due, which is often the newest of its lane: its place is looked
-- for from the end first). Returns true when it became the host's head: the
-- caller must then place the host.
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
  elseif how == 'due' then
    local last = redis.call('LINDEX', key, -1)
    if not last or string.sub(last, 1, 15) < id then
      length = redis.call('RPUSH', key, entry)
    else
      length = insert_by_id(key, id, entry)
    end
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
