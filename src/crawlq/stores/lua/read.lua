-- Read-only views of a frontier. keys[1] = "crawlq:{NAME}:".
-- args[1] = 'counts': returns {queued, leased, seen}; args[2] is 'bloom' when
--   seen is counted in meta rather than by the exact set.
-- args[1] = 'wait': milliseconds until a pop may lease something: 0 now, -1
--   when nothing is queued or leased (only an add can make a request ready).
local function read(keys, args)
  local P = keys[1]
  local queued = tonumber(redis.call('HGET', P .. 'meta', 'queued') or '0')
  local leased = redis.call('ZCARD', P .. 'leases')
  if args[1] == 'counts' then
    local seen
    if args[2] == 'bloom' then
      seen = tonumber(redis.call('HGET', P .. 'meta', 'seen') or '0')
    else
      seen = redis.call('SCARD', P .. 'seen')
    end
    return { queued, leased, seen }
  end
  if queued <= 0 and leased == 0 then
    return -1
  end
  if redis.call('ZCARD', P .. 'ready') > 0 then
    return 0
  end
  local clock = redis.call('TIME')
  local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
  local soonest = nil
  for _, key in ipairs({ P .. 'delayed', P .. 'leases' }) do
    local first = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
    if first[2] then
      local at = tonumber(first[2])
      if soonest == nil or at < soonest then
        soonest = at
      end
    end
  end
  if soonest == nil then
    return 0 -- queued yet filed nowhere: let a pop sort it out
  end
  return math.max(0, soonest - now)
end
