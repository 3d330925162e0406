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
    if args[3] == '0' and args[7] ~= '1' then
      -- Exact dedup in buckets (lib.lua): one bucket to start with.
      redis.call('HSET', meta, 'sl', 0, 'sp', 0, 'ns', 0)
    end
  elseif args[1] == '5' then
    local was = redis.call('HGET', meta, 'format')
    if was == '3' then
      -- Format 3 kept the queue's size in `queued`, which format 4 leaves
      -- as it is (the base its counters move from); seq0 makes duplicates
      -- count from here.
      redis.call('HSET', meta, 'seq0', redis.call('HGET', meta, 'seq') or '0')
    end
    if was == '3' or was == '4' then
      -- Format 5 keeps an older crawl's `seen` set (no sl in meta): the
      -- rest of the keys are the same, so the upgrade is this.
      redis.call('HSET', meta, 'format', '5')
    end
  end
  if #args > 7 then
    redis.call('HSET', meta, unpack(args, 8))
  end
  return redis.call('HMGET', meta, unpack(fields))
end

-- cluster_record: a Redis Cluster crawl's record, keys[1] = "crawlq:{NAME}:cluster".
-- Created with args (format, shard count, the shards' hash tags) unless it
-- exists; returns the stored {format, shards, tags} (tags false for a crawl
-- recorded before they were).
local function cluster_record(keys, args)
  if redis.call('EXISTS', keys[1]) == 0 then
    redis.call('HSET', keys[1], 'format', args[1], 'shards', args[2], 'tags', args[3])
  end
  return redis.call('HMGET', keys[1], 'format', 'shards', 'tags')
end

-- save_state: replace the crawler's state (keys[1] .. 'state') by args[1].
-- A function rather than a SET so that a full server still takes it.
local function save_state(keys, args)
  redis.call('SET', keys[1] .. 'state', args[1])
  return 1
end
