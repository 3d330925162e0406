-- Create a crawl's settings on first open, or read the existing ones.
-- keys[1] = "crawlq:{NAME}:". args: format, lifo, bloom bits, bloom hashes,
-- bloom capacity, bloom error rate, seen_ttl ('1': dedup keeps times), then
-- the opener's settings as name/value pairs (recorded for `crawlq
-- inspect`). Returns the stored {format, lifo, bloom bits, bloom hashes,
-- bloom capacity, bloom error rate, seen_ttl}.
local function open(keys, args)
  local meta = keys[1] .. 'meta'
  local fields = { 'format', 'lifo', 'bloom_bits', 'bloom_hashes', 'bloom_capacity',
    'bloom_error_rate', 'seen_ttl' }
  if redis.call('EXISTS', meta) == 0 then
    local time = redis.call('TIME')
    redis.call('HSET', meta, 'format', args[1], 'lifo', args[2], 'bloom_bits', args[3],
      'bloom_hashes', args[4], 'bloom_capacity', args[5], 'bloom_error_rate', args[6],
      'seen_ttl', args[7], 'created', time[1], 'seq', 0, 'queued', 0, 'seen', 0)
  elseif args[1] == '4' and redis.call('HGET', meta, 'format') == '3' then
    -- Format 3 kept the queue's size in `queued`, which format 4 leaves as
    -- it is (the base its counters move from); seq0 makes duplicates count
    -- from here. Same keys otherwise: the upgrade is this.
    redis.call('HSET', meta, 'format', '4', 'seq0', redis.call('HGET', meta, 'seq') or '0')
  end
  if #args > 7 then
    redis.call('HSET', meta, unpack(args, 8))
  end
  return redis.call('HMGET', meta, unpack(fields))
end

-- save_state: replace the crawler's state (keys[1] .. 'state') by args[1].
-- A function rather than a SET so that a full server still takes it.
local function save_state(keys, args)
  redis.call('SET', keys[1] .. 'state', args[1])
  return 1
end
