-- crawlq's Redis function library: host records and pacing. A host's state
-- is read once per call (host), filed where it belongs (place: `ready`,
-- `delayed`, or nowhere) and written back with the call's counters (save).
-- Relies on shared.lua (key names, HOST_POLICY, bounds, now, padded,
-- int_text, time_text, chunked, count_meta).

-- A host's own pacing setting `i` (1: its delay in ms, 2: its concurrency
-- limit, 0 for none), or `default` (the caller's) when it has none.
local function policy_of(name, i, default)
  local own = HOST_POLICY and HOST_POLICY[name]
  if own and own[i] then
    return own[i]
  end
  return default
end

-- Whether a ready time (ms of server time, 0: none) is still to come: no
-- TIME for a host that never paced.
local function to_come(ready)
  return ready > 0 and ready > now()
end

-- The state of a host, read once per script and written back by save().
local function host(name)
  local state = hosts[name]
  if state then
    return state
  end
  local value = redis.call('HGET', K_HOSTS, name)
  if value then
    local flag, leased, ready, head_score = struct.unpack('>BI4dd', value)
    local head_id, alone, filed, delayed_at = nil, nil, nil, nil
    if #value > 21 then
      head_id, alone = string.sub(value, 22, 36), #value > 36
    else
      head_score = nil
    end
    if flag == FLAG_R then
      filed = padded(leased) .. head_id .. name
    elseif flag == FLAG_D then
      delayed_at = ready
    end
    -- (every field in the constructor: the table is made at its size once)
    state = { flag = flag, leased = leased, ready = ready, head_score = head_score,
      head_id = head_id, alone = alone, filed = filed, delayed_at = delayed_at, dirty = false }
  else
    state = { flag = nil, leased = 0, ready = 0, head_score = nil, head_id = nil, alone = nil,
      filed = nil, delayed_at = nil, dirty = false }
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
    limit = policy_of(name, 2, CONCURRENCY)
  end
  if state.head_id == nil or (limit > 0 and state.leased >= limit) then
    if state.head_id == nil and state.leased <= 0 then
      if to_come(state.ready) then
        flag = FLAG_D -- keep its pacing until the delay has passed
      end
    else
      flag = FLAG_I
    end
  elseif to_come(state.ready) then
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

-- Write back the host records this call changed: one HSET, one HDEL.
local function save_hosts()
  local set, forget = nil, nil
  for name, state in pairs(hosts) do
    if state.dirty then
      if state.flag then
        set = set or {}
        set[#set + 1] = name
        set[#set + 1] = struct.pack('>BI4dd', state.flag, state.leased, state.ready,
          state.head_score or 0) .. (state.head_id or '') .. (state.alone and 'p' or '')
      else
        forget = forget or {}
        forget[#forget + 1] = name
      end
    end
  end
  if set then
    chunked('HSET', K_HOSTS, set, 2)
  end
  if forget then
    chunked('HDEL', K_HOSTS, forget, 1)
  end
end

-- Write back the host records and the counters this call moved.
local function save()
  save_hosts()
  count_meta('accepted', n_accepted)
  count_meta('popped', n_popped)
  count_meta('released', n_released)
  count_meta('expired', n_expired)
  count_meta('refetched', n_refetched)
  count_meta('revisits', n_revisits)
end
