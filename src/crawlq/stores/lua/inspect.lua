-- Priority histogram of some hosts' queues, for `crawlq inspect`.
-- keys[1] = "crawlq:{NAME}:", args = host names. Returns {score, count, ...}
-- summed over those hosts; each distinct score of a queue costs two lookups.
-- A host's head request is in its host record, the rest in its queue.
local function histogram(keys, args)
  local P = keys[1]
  local totals, order = {}, {}
  local heads = redis.call('HMGET', P .. 'hosts', unpack(args))
  for i, name in ipairs(args) do
    local record = heads[i]
    if record and #record > 21 then
      local score = tostring(select(4, struct.unpack('>BI4dd', record)))
      if totals[score] == nil then
        totals[score] = 0
        order[#order + 1] = score
      end
      totals[score] = totals[score] + 1
    end
    local queue = P .. 'q:' .. name
    local first = redis.call('ZRANGE', queue, 0, 0, 'WITHSCORES')
    local score = first[2]
    while score do
      local count = redis.call('ZCOUNT', queue, score, score)
      if totals[score] == nil then
        totals[score] = 0
        order[#order + 1] = score
      end
      totals[score] = totals[score] + count
      local after = redis.call('ZRANGEBYSCORE', queue, '(' .. score, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
      score = after[2]
    end
  end
  local out = {}
  for _, score in ipairs(order) do
    out[#out + 1] = score
    out[#out + 1] = totals[score]
  end
  return out
end
