-- ack_or_release: end leases.
-- Arguments after the common ones: 'a' (ack) or 'r' (release), count, then
-- (id, token) pairs. A pair whose token is not the request's current lease
-- (acked already, or expired and leased again) is ignored.
local function ack_or_release(keys, args)
  begin(keys, args)
  local replay = replayed()
  if replay then
    return replay
  end
  local MODE = args[ARG0 + 1]
  local COUNT = tonumber(args[ARG0 + 2])
  if COUNT > 0 then
    local ids = {}
    for i = 1, COUNT do
      ids[i] = args[ARG0 + 1 + 2 * i]
    end
    local records = redis.call('HMGET', K_LEASE, unpack(ids))
    local how = 'ack'
    if MODE == 'r' then
      how = 'release'
    end
    local affected = {}
    for i = 1, COUNT do
      local record = records[i]
      if record and lease_token(record) == args[ARG0 + 2 + 2 * i] then
        affected[end_lease(ids[i], record, how)] = true
      end
    end
    -- What may now come before the caller's prefetched requests: the heads of
    -- the hosts whose lease count (or queue) just changed.
    local best = nil
    for name in pairs(affected) do
      local head = hosts[name].head_score
      if head ~= nil and (best == nil or head < best) then
        best = head
      end
    end
    return finish('', best)
  end
  return finish('', nil)
end
