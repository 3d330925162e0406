-- ack_or_release: end leases. Relies on refill.lua (begin, conclude) and
-- leases.lua (end_leases, release_updated).
-- Arguments after the common ones: 'a' (ack) or 'r' (release), count, then
-- (id, token) pairs; or 'u' (release with updates), count, then (id, token,
-- score, payload) quads: see release_updated.
local function ack_or_release(keys, args)
  local replay = begin(keys, args)
  if replay then
    return replay
  end
  local mode = args[ARG0 + 1]
  if mode == 'u' then
    return conclude('', release_updated(ARG0 + 3, tonumber(args[ARG0 + 2])))
  end
  local how = 'ack'
  if mode == 'r' then
    how = 'release'
  end
  return conclude('', end_leases(ARG0 + 3, tonumber(args[ARG0 + 2]), how))
end
