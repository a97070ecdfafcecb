"""The Redis store's scripts: each is one atomic step on Redis, timed by Redis ``TIME`` (milliseconds), never by a
replica's clock. Keys, under the configured prefix P (lease ids and request ids are members or fields, never
part of a key name, so no id can name an internal key):

- ``P epoch``: who first wrote this state; a replica that finds it gone or changed knows the state was lost
  (flushed, restarted) and sets ``recover_until`` in ``P flags``: until then realtime is assumed on (the
  leases are gone with the state) and a realtime admission also keeps to the replica's share of the budget (the
  other replicas' charges are back only once each has written its ledger back);
- ``P flags`` (hash): ``<flag>_since`` (when the flag last turned on), ``recover_until``;
- ``P leases:<flag>`` (sorted set): lease id -> expiry (``inf``: none); ``P holders:<flag>`` (hash): its owner;
- ``P owners`` (sorted set): replica -> until when its charges count (renewed in the background);
- ``P sums`` (hash): replica -> its charges' total; ``P charges:<replica>`` (hash): request id -> "tokens seq";
  ``P gone:<replica>`` (hash): request id -> seq of a charge given back that a write-back sent before it must
  not bring back (kept until a write-back that knows of it).

Every script but release starts with the prelude: ARGV[1] P, ARGV[2] the epoch this replica knows, ARGV[3]
min_hold in ms, ARGV[4] recovery in ms, ARGV[5] this replica; its own arguments from ARGV[6]."""

from __future__ import annotations

PRELUDE = """
local P, known, hold, recovery, me = ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4]), ARGV[5]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local epoch = redis.call('GET', P .. 'epoch')
local lost = false
if not epoch then
  epoch = tostring(now) .. '/' .. me
  redis.call('SET', P .. 'epoch', epoch)
  lost = known ~= ''
elseif known ~= '' and epoch ~= known then
  lost = true
end
if lost then
  local cur = tonumber(redis.call('HGET', P .. 'flags', 'recover_until') or '0') or 0
  if now + recovery > cur then redis.call('HSET', P .. 'flags', 'recover_until', now + recovery) end
end
local recovering = now < (tonumber(redis.call('HGET', P .. 'flags', 'recover_until') or '0') or 0)
local function tokens_of(v) return tonumber(string.match(v, '^(%d+)')) or 0 end
for _, o in ipairs(redis.call('ZRANGEBYSCORE', P .. 'owners', '-inf', now)) do
  redis.call('HDEL', P .. 'sums', o)
  redis.call('DEL', P .. 'charges:' .. o, P .. 'gone:' .. o)
end
redis.call('ZREMRANGEBYSCORE', P .. 'owners', '-inf', now)
local function leases(flag)
  local z = P .. 'leases:' .. flag
  for _, l in ipairs(redis.call('ZRANGEBYSCORE', z, '-inf', now)) do redis.call('HDEL', P .. 'holders:' .. flag, l) end
  redis.call('ZREMRANGEBYSCORE', z, '-inf', now)
  return z
end
local function on(flag)
  if flag == 'realtime' and recovering then return true end
  if redis.call('ZCARD', leases(flag)) > 0 then return true end
  local since = tonumber(redis.call('HGET', P .. 'flags', flag .. '_since') or '')
  return since ~= nil and now < since + hold
end
local function total()
  local sum = 0
  for _, v in ipairs(redis.call('HVALS', P .. 'sums')) do sum = sum + (tonumber(v) or 0) end
  return sum
end
local function alive(ttl)
  redis.call('ZADD', P .. 'owners', now + ttl, me)
  redis.call('PEXPIRE', P .. 'charges:' .. me, ttl)
  redis.call('PEXPIRE', P .. 'gone:' .. me, ttl)
end
"""

SNAPSHOT = (
    PRELUDE
    + """
return {on('maintenance') and 1 or 0, on('realtime') and 1 or 0, total(), redis.call('ZCARD', P .. 'owners'),
  recovering and 1 or 0, epoch}
"""
)

# ARGV[6] request, [7] tokens, [8] seq, [9] threshold, [10] budget, [11] owner ttl (ms), [12] this replica's
# share of the budget: 1 charged, 0 refused
ADMIT = (
    PRELUDE
    + """
local rid, n, seq, threshold, budget, ttl, share = ARGV[6], tonumber(ARGV[7]), ARGV[8], tonumber(ARGV[9]),
  tonumber(ARGV[10]), tonumber(ARGV[11]), tonumber(ARGV[12])
local key = P .. 'charges:' .. me
redis.call('HDEL', P .. 'gone:' .. me, rid)
local old = redis.call('HGET', key, rid)
local already = old and tokens_of(old) or 0
if on('realtime') then
  local own = tonumber(redis.call('HGET', P .. 'sums', me) or '0') or 0
  if n > threshold or total() - already + n > budget then return {0, epoch} end
  if recovering and own - already + n > share then return {0, epoch} end
end
redis.call('HSET', key, rid, n .. ' ' .. seq)
redis.call('HINCRBY', P .. 'sums', me, n - already)
alive(ttl)
return {1, epoch}
"""
)

# ARGV[1] P, [2] replica, [3] owner ttl (ms), then request, seq for each: give back their charges (once) and
# keep a write-back sent before from bringing them back
RELEASE = """
local key, gone = ARGV[1] .. 'charges:' .. ARGV[2], ARGV[1] .. 'gone:' .. ARGV[2]
for i = 4, #ARGV, 2 do
  local v = redis.call('HGET', key, ARGV[i])
  if v then
    redis.call('HDEL', key, ARGV[i])
    redis.call('HINCRBY', ARGV[1] .. 'sums', ARGV[2], -(tonumber(string.match(v, '^(%d+)')) or 0))
  end
  redis.call('HSET', gone, ARGV[i], ARGV[i + 1])
end
redis.call('PEXPIRE', gone, ARGV[3])
return {1, ''}
"""

# ARGV[6] flag, [7] lease, [8] ttl in ms ('inf': none), [9] most leases: 1 held, -1 too many
HOLD = (
    PRELUDE
    + """
local flag, lease, ttl, most = ARGV[6], ARGV[7], ARGV[8], tonumber(ARGV[9])
local z = leases(flag)
if not redis.call('ZSCORE', z, lease) and redis.call('ZCARD', z) >= most then return {-1, epoch} end
if not on(flag) then redis.call('HSET', P .. 'flags', flag .. '_since', now) end
redis.call('ZADD', z, ttl == 'inf' and '+inf' or (now + tonumber(ttl)), lease)
redis.call('HSET', P .. 'holders:' .. flag, lease, me)
return {1, epoch}
"""
)

# ARGV[6] flag, [7] lease
DROP = (
    PRELUDE
    + """
redis.call('ZREM', P .. 'leases:' .. ARGV[6], ARGV[7])
redis.call('HDEL', P .. 'holders:' .. ARGV[6], ARGV[7])
return {1, epoch}
"""
)

# {owners, total, per flag {on, held ms (-1: not held), {{id, owner, ms left (-1: no expiry)}...}}, epoch}
STATE = (
    PRELUDE
    + """
local out = {redis.call('ZCARD', P .. 'owners'), total()}
for _, flag in ipairs({'maintenance', 'realtime'}) do
  local z = leases(flag)
  local is_on = on(flag)
  local list = redis.call('ZRANGE', z, 0, -1, 'WITHSCORES')
  local since = tonumber(redis.call('HGET', P .. 'flags', flag .. '_since') or '') or now
  local held = -1
  if is_on and #list == 0 then held = math.max(since + hold, recovering and flag == 'realtime' and
    tonumber(redis.call('HGET', P .. 'flags', 'recover_until')) or 0) - now end
  local views = {}
  for i = 1, #list, 2 do
    local left = list[i + 1] == 'inf' and -1 or (tonumber(list[i + 1]) - now)
    views[#views + 1] = {list[i], redis.call('HGET', P .. 'holders:' .. flag, list[i]) or '', left}
  end
  out[#out + 1] = {is_on and 1 or 0, held, views}
end
out[#out + 1] = epoch
return out
"""
)

# ARGV[6] owner ttl (ms), [7] the ledger's seq, then request, tokens, seq for each charge in the ledger: the
# replica's charges made what the ledger says (those it cannot know of, later than its seq, kept); then as SNAPSHOT
RENEW = (
    PRELUDE
    + """
local key, ttl, upto = P .. 'charges:' .. me, tonumber(ARGV[6]), tonumber(ARGV[7])
local want = {}
for i = 8, #ARGV, 3 do want[ARGV[i]] = ARGV[i + 1] .. ' ' .. ARGV[i + 2] end
local have = redis.call('HGETALL', key)
for i = 1, #have, 2 do
  local seq = tonumber(string.match(have[i + 1], ' (%d+)$'))
  if want[have[i]] == nil and (seq == nil or seq <= upto) then redis.call('HDEL', key, have[i]) end
end
local gone = P .. 'gone:' .. me
local dead = redis.call('HGETALL', gone)
for i = 1, #dead, 2 do
  if want[dead[i]] then want[dead[i]] = nil else redis.call('HDEL', gone, dead[i]) end
end
for rid, v in pairs(want) do redis.call('HSET', key, rid, v) end
local sum = 0
for _, v in ipairs(redis.call('HVALS', key)) do sum = sum + tokens_of(v) end
redis.call('HSET', P .. 'sums', me, sum)
alive(ttl)
return {on('maintenance') and 1 or 0, on('realtime') and 1 or 0, total(), redis.call('ZCARD', P .. 'owners'),
  recovering and 1 or 0, epoch}
"""
)
