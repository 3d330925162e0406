-- pop: lease the next requests in order. Expired leases and hosts whose
-- delay has passed come back first. No arguments of its own: the common ones
-- say how many to lease and which stale prefetched requests to give back.
-- Relies on refill.lua (begin, conclude).
local function pop(keys, args)
  return begin(keys, args) or conclude('', nil)
end
