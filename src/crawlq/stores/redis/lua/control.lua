-- control: host controls shared by every worker of a crawl. Relies on
-- shared.lua and hosts.lua (host, place, save).
-- keys[1] = "crawlq:{NAME}:". args: what, host_delay (microseconds),
-- host_concurrency (0: no limit) of the caller, the host, then
--   'block' ms:  hand out nothing of the host for ms from now (a block ending
--                sooner than the current one changes nothing); returns 1 if
--                the block changed, 0 if not
--   'unblock':   end the host's block now; returns 1 if it had one
--   'policy' delay_ms concurrency: the host's own pacing ('' for the
--                caller's); both '' removes it; returns 1
local function control(keys, args)
  set_keys(keys[1])
  DELAY_MS = tonumber(args[2]) / 1000
  CONCURRENCY = tonumber(args[3])
  hosts, n_accepted, n_popped, n_released, n_expired, n_refetched, n_revisits =
    {}, 0, 0, 0, 0, 0, 0
  local what, name = args[1], args[4]
  local block = redis.call('HGET', K_BLOCKS, name)
  local blocked_until, pace
  if block then
    local a, b = string.match(block, '^(%S+) (%S+)$')
    blocked_until, pace = tonumber(a), tonumber(b)
  end
  local state = host(name)
  if what == 'block' then
    local ends = now() + tonumber(args[5])
    if blocked_until ~= nil and blocked_until >= ends then
      return 0
    end
    if blocked_until == nil or blocked_until <= now() or state.ready ~= blocked_until then
      pace = state.ready
    end
    redis.call('HSET', K_BLOCKS, name, time_text(ends) .. ' ' .. time_text(pace))
    state.ready = ends
  elseif what == 'unblock' then
    if blocked_until == nil then
      return 0
    end
    redis.call('HDEL', K_BLOCKS, name)
    if state.ready ~= blocked_until then
      return 1
    end
    state.ready = pace
  else
    local delay, concurrency = args[5], args[6]
    local policies = HOST_POLICY or {} -- set_keys made it current
    if delay == '' and concurrency == '' then
      redis.call('HDEL', K_POLICY, name)
      policies[name] = nil
    else
      redis.call('HSET', K_POLICY, name, delay .. ' ' .. concurrency)
      policies[name] = { tonumber(delay), tonumber(concurrency) }
    end
    if next(policies) == nil then
      policies = false
    end
    POLICIES[P] = { policies, now() }
    HOST_POLICY = policies
  end
  if state.flag ~= nil or state.ready > now() then
    place(name, state)
    save()
  end
  return 1
end
