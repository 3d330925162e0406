-- ack_or_release: end leases. Relies on refill.lua (begin, conclude),
-- due.lua (finish_tuples) and leases.lua (end_leases, release_updated).
-- Arguments after the common ones: 'a' (ack) or 'r' (release), count, then
-- (id, token) pairs; or 'u' (release with updates), count, then (id, token,
-- score, payload) quads: see release_updated; or 'd' (release, some with a
-- delay), count, then (id, token, delay ms, score, payload) tuples; or 'f'
-- (ack, some refetching), count, a floor ('' but on a cluster shard: see
-- "Ids across shards" in add.lua), then such tuples: see finish_tuples.
local function ack_or_release(keys, args)
  local replay = begin(keys, args)
  if replay then
    return replay
  end
  local mode = args[ARG0 + 1]
  local count = tonumber(args[ARG0 + 2])
  if mode == 'u' then
    return conclude('', release_updated(ARG0 + 3, count))
  elseif mode == 'd' then
    return conclude('', finish_tuples(ARG0 + 3, count, false))
  elseif mode == 'f' then
    local floor = tonumber(args[ARG0 + 3])
    if floor == nil then
      return conclude('', finish_tuples(ARG0 + 4, count, true))
    end
    NUMBER = math.max(tonumber(redis.call('HGET', K_META, 'idb') or '0'), floor)
    local best = finish_tuples(ARG0 + 4, count, true)
    local mark = string.format('%d', NUMBER)
    redis.call('HSET', K_META, 'idb', mark)
    return conclude(':' .. mark, best)
  end
  local how = 'ack'
  if mode == 'r' then
    how = 'release'
  end
  return conclude('', end_leases(ARG0 + 3, count, how))
end
