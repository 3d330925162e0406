-- ack_or_release: end leases. Relies on refill.lua (begin, conclude) and
-- leases.lua (end_leases).
-- Arguments after the common ones: 'a' (ack) or 'r' (release), count, then
-- (id, token) pairs.
local function ack_or_release(keys, args)
  local replay = begin(keys, args)
  if replay then
    return replay
  end
  local how = 'ack'
  if args[ARG0 + 1] == 'r' then
    how = 'release'
  end
  return conclude('', end_leases(ARG0 + 3, tonumber(args[ARG0 + 2]), how))
end
