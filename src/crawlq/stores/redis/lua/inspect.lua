-- Views of hosts' queues for `crawlq inspect`: histogram and
-- queued_per_host. Relies on queues.lua (lane_of).

-- The returned requests of one host (r:HOST, see queues.lua) appended to
-- `out` by score, a ZCOUNT per lane rank they hold.
local function returned_scores(P, name, out)
  local key = P .. 'r:' .. name
  local first = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
  while first[2] do
    local rank = tonumber(first[2])
    local text = string.format('%d', rank)
    out[#out + 1] = string.format('%d', (rank - rank % 2) / 2)
    out[#out + 1] = redis.call('ZCOUNT', key, text, text)
    first = redis.call('ZRANGE', key, '(' .. text, '+inf', 'BYSCORE', 'LIMIT', 0, 1, 'WITHSCORES')
  end
  return out
end

-- The queued requests of one host by score, {score text, count, ...} (a
-- score may come more than once, for its FIFO and LIFO lanes and its
-- returned requests): its only request (record ending in 'p'), or its
-- lists l:LANE:HOST (its head's lane and those of its index i:HOST) and
-- r:HOST.
local function host_scores(P, name, record)
  if not record or #record <= 21 then
    return {}
  end
  local score = select(4, struct.unpack('>BI4dd', record))
  if #record > 36 then
    return { string.format('%d', score), 1 }
  end
  local lanes = redis.call('ZRANGE', P .. 'i:' .. name, 0, -1)
  table.insert(lanes, 1, lane_of(score, string.sub(record, 22, 36)))
  local out = {}
  for _, lane in ipairs(lanes) do
    local count = redis.call('LLEN', P .. 'l:' .. lane .. ':' .. name)
    if count > 0 then
      out[#out + 1] = string.match(lane, '^-?%d+')
      out[#out + 1] = count
    end
  end
  return returned_scores(P, name, out)
end

-- Priority histogram of some hosts' queues, for `crawlq inspect`.
-- keys[1] = "crawlq:{NAME}:", args = host names. Returns {score, count, ...}
-- summed over those hosts; each distinct score of a queue costs a lookup.
local function histogram(keys, args)
  local P = keys[1]
  local totals, order = {}, {}
  local records = redis.call('HMGET', P .. 'hosts', unpack(args))
  for i, name in ipairs(args) do
    local counts = host_scores(P, name, records[i])
    for k = 1, #counts, 2 do
      local score = counts[k]
      if totals[score] == nil then
        totals[score] = 0
        order[#order + 1] = score
      end
      totals[score] = totals[score] + counts[k + 1]
    end
  end
  local out = {}
  for _, score in ipairs(order) do
    out[#out + 1] = score
    out[#out + 1] = totals[score]
  end
  return out
end

-- How many requests each of some hosts has queued (its head included).
-- keys[1] = "crawlq:{NAME}:", args = host names. Returns one count per host.
local function queued_per_host(keys, args)
  local P = keys[1]
  local records = redis.call('HMGET', P .. 'hosts', unpack(args))
  local out = {}
  for i, name in ipairs(args) do
    local counts = host_scores(P, name, records[i])
    local n = 0
    for k = 2, #counts, 2 do
      n = n + counts[k]
    end
    out[i] = n
  end
  return out
end
