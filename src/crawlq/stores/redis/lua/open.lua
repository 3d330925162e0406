-- Opening a crawl: open (and the format upgrades), upgrade_queues (format 5
-- to 6's lists), cluster_record,
-- save_state. Relies on shared.lua (set_keys, chunked) and queues.lua
-- (lane_of, lane_rank).

-- Create a crawl's settings on first open, or read the existing ones.
-- keys[1] = "crawlq:{NAME}:". args: format, lifo, bloom bits, bloom hashes,
-- bloom capacity, bloom error rate, seen_ttl ('1': dedup keeps times), then
-- the opener's settings as name/value pairs (recorded for `crawlq
-- inspect`). Returns the stored {format, lifo, bloom bits, bloom hashes,
-- bloom capacity, bloom error rate, seen_ttl, upgrade}: upgrade is false,
-- or the place ('0' at first) where upgrade_queues goes on.
local function open(keys, args)
  local meta = keys[1] .. 'meta'
  local fields = { 'format', 'lifo', 'bloom_bits', 'bloom_hashes', 'bloom_capacity',
    'bloom_error_rate', 'seen_ttl', 'upgrade' }
  if redis.call('EXISTS', meta) == 0 then
    local time = redis.call('TIME')
    -- The fields most calls read or move come first: meta is a listpack,
    -- searched from its start for each field a command names (2% of a
    -- crawl step's server instructions, measured with callgrind).
    redis.call('HSET', meta, 'seq', 0)
    if args[3] == '0' and args[7] ~= '1' then
      -- Exact dedup in buckets (seen.lua): one bucket to start with, fields
      -- of 11 bytes.
      redis.call('HSET', meta, 'sl', 0, 'sp', 0, 'ns', 0, 'sw', 11)
    end
    redis.call('HSET', meta, 'accepted', 0, 'popped', 0, 'format', args[1], 'lifo', args[2],
      'bloom_bits', args[3], 'bloom_hashes', args[4], 'bloom_capacity', args[5],
      'bloom_error_rate', args[6], 'seen_ttl', args[7], 'created', time[1], 'queued', 0,
      'seen', 0)
  elseif args[1] == '9' then
    local was = redis.call('HGET', meta, 'format')
    if was == '3' then
      -- Format 3 kept the queue's size in `queued`, which format 4 leaves
      -- as it is (the base its counters move from); seq0 makes duplicates
      -- count from here.
      redis.call('HSET', meta, 'seq0', redis.call('HGET', meta, 'seq') or '0')
    end
    if was == '3' or was == '4' or was == '5' then
      -- Format 5 keeps an older crawl's `seen` set (no sl in meta); format
      -- 6 moves queued requests into lists, host by host (upgrade_queues,
      -- which the opener runs to the end before any other call). The
      -- format changes first, so an older crawlq refuses the crawl from now.
      redis.call('HSET', meta, 'format', '9', 'upgrade', '0')
    elseif was == '6' or was == '7' or was == '8' then
      -- Format 7 adds scheduled requests (`due`, meta refetched and
      -- revisits), all absent (0) in a format-6 crawl: nothing to move. A
      -- format-6 crawlq must not open it once it may hold them (it would
      -- count them as queued and never hand them out). An upgrade to 6 left
      -- unfinished (meta `upgrade`) goes on as it would have. Format 8 adds
      -- r:HOST and marked list entries (queues.lua), which a format-7 crawl
      -- has none of; a format-7 crawlq would hand a marked entry out with
      -- its mark and never see r:HOST, so it must not open one. Format 9
      -- adds the wide entries (below), which a format-8 crawlq would pop
      -- as a host.
      redis.call('HSET', meta, 'format', '9')
    end
  end
  if redis.call('HGET', meta, 'format') == '9' then
    -- The wide entries (see shared.lua), at every open (a purge drops
    -- them); never in a crawl of another format, which is refused as it is.
    redis.call('ZADD', keys[1] .. 'ready', 'NX', 'inf', WIDE)
    redis.call('ZADD', keys[1] .. 'leases', 'NX', 'inf', WIDE)
    redis.call('HSETNX', keys[1] .. 'hosts', '', WIDE)
    redis.call('HSETNX', keys[1] .. 'lease', '@', WIDE)
  end
  if #args > 7 then
    redis.call('HSET', meta, unpack(args, 8))
  end
  return redis.call('HMGET', meta, unpack(fields))
end

-- upgrade_queues: move a format-5 crawl's queued requests (a host's head in
-- its record, the rest in zset q:HOST, payloads in `p`) into format 6's
-- lists, for up to args[1] hosts a call. keys[1] = "crawlq:{NAME}:".
-- Returns 1 once every host is moved (meta `upgrade` then goes), else 0.
-- A host moved already (a scan may return it twice) has its lists: skipped.
local function upgrade_queues(keys, args)
  set_keys(keys[1])
  local cursor = redis.call('HGET', K_META, 'upgrade')
  if not cursor then
    return 1
  end
  local scan = redis.call('HSCAN', K_HOSTS, cursor, 'COUNT', args[1])
  local flat = scan[2]
  for i = 1, #flat, 2 do
    local name, record = flat[i], flat[i + 1]
    if #record == 36 then -- (longer: alone in `p`, a format-6 record)
      local head_id = string.sub(record, 22)
      local head_lane = lane_of(select(4, struct.unpack('>BI4dd', record)), head_id)
      if redis.call('EXISTS', K_L .. head_lane .. ':' .. name) == 0 then
        local ids, lanes = { head_id }, { head_lane }
        local rest = redis.call('ZRANGE', K_Q .. name, 0, -1, 'WITHSCORES')
        for k = 1, #rest, 2 do
          ids[#ids + 1] = rest[k]
          lanes[#lanes + 1] = lane_of(tonumber(rest[k + 1]), rest[k])
        end
        -- In (score, id) order, as the zset had them: each lane's ids ascend.
        local distinct, index = {}, {}
        for from = 1, #ids, 1000 do
          local to = math.min(from + 999, #ids)
          local payloads = redis.call('HMGET', K_P, unpack(ids, from, to))
          local lists, order = {}, {}
          for k = from, to do
            local lane = lanes[k]
            local list = lists[lane]
            if list == nil then
              list = {}
              lists[lane] = list
              order[#order + 1] = lane
            end
            list[#list + 1] = ids[k] .. (payloads[k - from + 1] or '')
          end
          for _, lane in ipairs(order) do
            chunked('RPUSH', K_L .. lane .. ':' .. name, lists[lane], 1)
            if not distinct[lane] and lane ~= head_lane then
              distinct[lane] = true
              index[#index + 1] = lane_rank(lane)
              index[#index + 1] = lane
            end
          end
          chunked('HDEL', K_P, { unpack(ids, from, to) }, 1)
        end
        if #index > 0 then
          chunked('ZADD', K_I .. name, index, 2)
        end
        redis.call('DEL', K_Q .. name)
      end
    end
  end
  if scan[1] == '0' then
    redis.call('HDEL', K_META, 'upgrade')
    return 1
  end
  redis.call('HSET', K_META, 'upgrade', scan[1])
  return 0
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
