-- crawlq's Redis function library: a host's queued requests, in its lists
-- l:LANE:HOST and index i:HOST (or alone in `p`): enqueue and dequeue keep
-- a host record's head current. Relies on shared.lua (key names, freed,
-- int_text).

-- How far past a lane list's front a request coming back is looked for
-- (entries): a released, expired or unpopped request is usually among the
-- oldest of its lane (or, with lifo, behind the few added since it left).
local WALK = 128

-- Where request `id` goes in lane list `key` (ascending ids) when it comes
-- back ('back') or comes due ('due': often the newest of its lane, so its
-- end is looked at first): 'front', 'tail', or 'before' and the entry it
-- goes before, found within WALK entries of the front; nil when its place
-- is deeper (the caller files it in r:HOST). A constant number of commands
-- whatever the list's length.
local function spot(key, id, due)
  if due then
    local last = redis.call('LINDEX', key, -1)
    if not last or string.sub(last, 1, 15) < id then
      return 'tail'
    end
  end
  local first = redis.call('LINDEX', key, 0)
  if not first or id < string.sub(first, 1, 15) then
    return 'front'
  end
  local chunk = redis.call('LRANGE', key, 1, WALK)
  for _, e in ipairs(chunk) do
    if string.sub(e, 1, 15) > id then
      return 'before', e
    end
  end
  if #chunk < WALK then
    return 'tail'
  end
  if not due and string.sub(redis.call('LINDEX', key, -1), 1, 15) < id then
    return 'tail'
  end
  return nil
end

-- A list entry's payload: what follows its id, and its mark if marked.
local function entry_payload(entry)
  if string.byte(entry, 16) == 94 then -- '^'
    return string.sub(entry, 17)
  end
  return string.sub(entry, 16)
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

-- A request's lane rank as a number (score 2 S, + 1 in an L lane): the
-- score of its lane in i:HOST and of itself in r:HOST.
local function rank_of(score, id)
  if string.byte(id, 1) >= 53 then
    return 2 * score + 1
  end
  return 2 * score
end

-- Returned requests. A request that comes back or comes due deeper in its
-- lane than spot() looks is not put in the list (a list has no insert in
-- the middle cheaper than a walk to it): it is filed in zset r:HOST, score
-- its lane rank, member its id, so ZRANGE 0 0 gives the first of them in
-- the order of the host's queue; its payload stays in `p`. ZADD: O(log n).
-- The host's head is still the first entry of its lane's list, and while
-- r:HOST is not empty the head is marked ('^' after its id): dequeue() of a
-- marked entry (only then) compares the list's next with the first of
-- r:HOST, moves that one to its list's front if it comes first, and marks
-- the new head again while r:HOST holds more. A new head that comes before
-- a marked one needs no mark: the marked entry still comes before every
-- returned request. So an unmarked pop costs what it cost before r:HOST.
local function mark_head(name, state)
  local key = K_L .. lane_of(state.head_score, state.head_id) .. ':' .. name
  local first = redis.call('LINDEX', key, 0)
  if first and string.byte(first, 16) ~= 94 then
    redis.call('LSET', key, 0, string.sub(first, 1, 15) .. '^' .. string.sub(first, 16))
  end
end

-- Queue request `id` of host `name`: `payload` is its encoded request, or
-- nil when it is in `p` already (a leased or scheduled request). A host's
-- only request stays in (or goes to) `p` ("alone" in its record); others go
-- to their lane's list: at the end (`how` 'tail', a FIFO add: its id is the
-- lane's highest), the front ('front', a LIFO add: the lowest) or at their
-- place by id ('back', a request coming back; 'due', a scheduled request
-- coming due), found by spot(), or filed in r:HOST when that place is
-- deeper (never the head then: an older entry of its lane comes first).
-- Returns true when it became the host's head: the caller must then place
-- the host.
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
  local lane = lane_of(score, id)
  local key = K_L .. lane .. ':' .. name
  local length
  if how == 'tail' then
    length = redis.call('RPUSH', key, id .. payload)
  elseif how == 'front' then
    length = redis.call('LPUSH', key, id .. payload)
  else
    local where, pivot = spot(key, id, how == 'due')
    if where == nil then
      redis.call('ZADD', K_R .. name, int_text(rank_of(score, id)), id)
      mark_head(name, state)
      return false
    end
    if payload == nil then
      payload = redis.call('HGET', K_P, id) or ''
      freed[#freed + 1] = id
    end
    if where == 'tail' then
      length = redis.call('RPUSH', key, id .. payload)
    elseif where == 'front' then
      length = redis.call('LPUSH', key, id .. payload)
    else
      length = redis.call('LINSERT', key, 'BEFORE', pivot, id .. payload)
    end
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

-- The host's next head after its marked head left lane `lane` (list `key`,
-- whose first entry is now `rest`, or none): the first of its lists (`rest`,
-- else the first of the index's best lane) or the first of r:HOST,
-- whichever comes first in the host's order (lane rank, then id); marked
-- while r:HOST holds more (see "Returned requests" above).
local function next_head_returned(name, state, lane, key, rest)
  local returned = redis.call('ZRANGE', K_R .. name, 0, 1, 'WITHSCORES')
  local list_lane, list_key, list_first, indexed = lane, key, rest, false
  if not rest then
    list_lane = redis.call('ZRANGE', K_I .. name, 0, 0)[1]
    list_first = nil
    if list_lane then
      list_key = K_L .. list_lane .. ':' .. name
      list_first = redis.call('LINDEX', list_key, 0)
      indexed = true
    end
  end
  local r_id = returned[1]
  local r_rank = r_id and tonumber(returned[2])
  local list_rank = list_first and tonumber(lane_rank(list_lane))
  if list_first and (r_id == nil or list_rank < r_rank
      or (list_rank == r_rank and string.sub(list_first, 1, 15) < r_id)) then
    -- The list's next comes first (r:HOST empty: a mark left behind).
    if indexed then
      redis.call('ZREM', K_I .. name, list_lane)
    end
    if r_id and string.byte(list_first, 16) ~= 94 then
      redis.call('LSET', list_key, 0,
        string.sub(list_first, 1, 15) .. '^' .. string.sub(list_first, 16))
    end
    state.head_score = tonumber(string.match(list_lane, '^-?%d+'))
    state.head_id = string.sub(list_first, 1, 15)
    return
  end
  if r_id == nil then
    state.head_score, state.head_id = nil, nil
    return
  end
  -- The first returned request comes first: to the front of its lane's list.
  redis.call('ZREM', K_R .. name, r_id)
  local score = (r_rank - r_rank % 2) / 2
  local r_lane = lane_of(score, r_id)
  local payload = redis.call('HGET', K_P, r_id) or ''
  freed[#freed + 1] = r_id
  redis.call('LPUSH', K_L .. r_lane .. ':' .. name, r_id .. (returned[3] and '^' or '') .. payload)
  if indexed and r_lane == list_lane then
    redis.call('ZREM', K_I .. name, list_lane) -- the head's lane is not indexed
  elseif rest and r_lane ~= lane then
    redis.call('ZADD', K_I .. name, lane_rank(lane), lane) -- no longer the head's
  end
  state.head_score, state.head_id = score, r_id
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
  if string.byte(entry, 16) == 94 then -- marked: r:HOST may hold the next
    next_head_returned(name, state, lane, key, after)
    return string.sub(entry, 1, 15), string.sub(entry, 17), false
  end
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
