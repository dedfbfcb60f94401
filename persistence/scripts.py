"""Lua scripts: every multi-key update of a conversation is one atomic script.

A script refuses with an error whose first word is its kind (``NOTFOUND``, ``TRANSITION``, ``EXISTS``);
``RedisStore`` maps the kind to an exception (``SCRIPT_ERRORS``), never the wording.

All scripts take ``KEYS = ConversationKeys.durable`` (state, cp, msgs, order, inbox, notes) so
they touch only keys sharing one hash tag, and refresh the retention TTL of all of them. Those that write a
checkpoint, move the head or set the conversation's notes are fenced (``_FENCED``, run by
``RedisStore._fenced``): they also take the lease and the writer's token, and refuse (``LEASE``) a writer whose
lease another worker holds.

A client sends a command again when Redis did not answer in time (a stall, a restart): Redis may then run both
copies. Every write of a checkpoint recognises a copy of itself that already ran and answers as the first did
(``REPLAYED`` in a script's comments), so a write is done once whatever the client sent: a message is never appended
twice, nor the inbox trimmed twice for it, and a worker never takes its own commit, fork or lease for someone else's.
What makes a copy recognisable is an id new to every write: the checkpoint's or the lease token's own, or (for an
append, a commit, a change of status) the write id the checkpoint keeps of the last write it took (``:w``; its
writer sends nothing else to it before it has the answer).
"""

from __future__ import annotations

_PRELUDE = """
local K_STATE, K_CP, K_MSGS, K_ORDER, K_INBOX, K_NOTES = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local function touch(ttl, last)
  -- the retention ttl on the conversation's keys (KEYS[1..last], default all); other keys keep their own
  ttl = tonumber(ttl)
  if ttl and ttl > 0 then
    for i = 1, (last or #KEYS) do redis.call('EXPIRE', KEYS[i], ttl) end  -- 0 (no-op) for a missing key
  end
end
local function append(id, first, last_arg)
  -- ARGV[first], ARGV[first+1] ... are (message json, tokens) pairs
  local n = tonumber(redis.call('HGET', K_CP, id .. ':n'))
  local added_tokens = 0
  local i = first
  while i < last_arg do
    redis.call('HSET', K_MSGS, id .. ':' .. n, ARGV[i])
    added_tokens = added_tokens + tonumber(ARGV[i + 1])
    n = n + 1
    i = i + 2
  end
  redis.call('HSET', K_CP, id .. ':n', n)
  redis.call('HINCRBY', K_CP, id .. ':tok', added_tokens)
  return n
end
"""

_FENCED = _PRELUDE + """
-- Fencing: KEYS[7] is the conversation's lease and ARGV[1] the writer's token ('' for a writer that holds none:
-- orchestration, the command line). Both are taken off before the script proper reads its KEYS and ARGV. A
-- writer whose lease another worker holds now is refused; one whose lease lapsed with nobody taking it may write.
local fence_holder = redis.call('GET', KEYS[7])
local fence_token = table.remove(ARGV, 1)
table.remove(KEYS, 7)
if fence_token ~= '' and fence_holder and fence_holder ~= fence_token then
  return redis.error_reply('LEASE another worker holds the conversation now; this write is refused')
end
"""

# ARGV: id, kind, parent ('' for none), meta json, now, ttl, inbox items consumed, [msg json, tokens]...
CREATE = _FENCED + """
local id, kind, parent, meta, now, ttl, consumed = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6], ARGV[7]
local existing = redis.call('HGET', K_CP, id .. ':meta')
if existing == meta then return 1 end  -- REPLAYED: this very checkpoint, created by the copy that ran first
if existing then
  return redis.error_reply('EXISTS checkpoint ' .. id .. ' already exists')
end
if parent ~= '' and redis.call('HEXISTS', K_CP, parent .. ':meta') == 0 then
  return redis.error_reply('NOTFOUND parent checkpoint ' .. parent .. ' does not exist')
end
redis.call('HSET', K_CP, id .. ':meta', meta, id .. ':status', 'running', id .. ':n', 0,
  id .. ':tok', 0, id .. ':consumed', consumed, id .. ':parent', parent, id .. ':kind', kind)
redis.call('RPUSH', K_ORDER, id)
if redis.call('HSETNX', K_STATE, 'created_at', now) == 1 then
  redis.call('HSET', K_STATE, 'version', 0)
end
redis.call('HSET', K_STATE, 'updated_at', now)
if kind == 'turn' then redis.call('HSET', K_STATE, 'active', id) end
append(id, 8, #ARGV)
touch(ttl)
return 1
"""

# KEYS: the durable keys, the lease and (optional) the prepared handoff.
# ARGV: id, parent, meta json, now, ttl, expected head ('' for none), outcome json, [msg json, tokens]...
# A compaction in one atomic step: the forked checkpoint is created completed and becomes the head, or (when
# the head moved) nothing is written and {0, actual head} is returned. A process that dies mid-compaction
# therefore never leaves a half-written compaction behind.
FORK_COMMIT = _FENCED + """
local id, parent, meta, now, ttl, expected, outcome = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6], ARGV[7]
local head = redis.call('HGET', K_STATE, 'head') or ''
if head == id then  -- REPLAYED: this fork (its id is new to every fork) is the head already
  return {1, tonumber(redis.call('HGET', K_STATE, 'version')), redis.call('LLEN', K_INBOX)}
end
if head ~= expected then return {0, head} end
if redis.call('HEXISTS', K_CP, id .. ':meta') == 1 then
  return redis.error_reply('EXISTS checkpoint ' .. id .. ' already exists')
end
if redis.call('HEXISTS', K_CP, parent .. ':meta') == 0 then
  return redis.error_reply('NOTFOUND parent checkpoint ' .. parent .. ' does not exist')
end
redis.call('HSET', K_CP, id .. ':meta', meta, id .. ':status', 'running', id .. ':n', 0,
  id .. ':tok', 0, id .. ':consumed', 0, id .. ':parent', parent, id .. ':kind', 'compaction')
redis.call('RPUSH', K_ORDER, id)
append(id, 8, #ARGV)
redis.call('HSET', K_CP, id .. ':status', 'completed', id .. ':out', outcome)
redis.call('HSET', K_STATE, 'head', id, 'updated_at', now)
local version = redis.call('HINCRBY', K_STATE, 'version', 1)
-- KEYS[7], when given: the handoff planned ahead, which this fork adopted or made stale (it starts a new epoch)
if KEYS[7] then redis.call('DEL', KEYS[7]) end
touch(ttl, 6)
return {1, version, redis.call('LLEN', K_INBOX)}
"""

# KEYS: state, cp, prepared. ARGV: the checkpoint it was planned from, the record (json), its expiry (ms), the most
# checkpoints to walk. Keeps the handoff planned ahead only while that checkpoint is the head or an ancestor of it in
# the head's epoch (a walk up the turns' parents that stops at the epoch's first checkpoint): a plan that finished
# after a fork, or after the head left its lineage, is never kept. Returns 1 when kept, else 0.
KEEP_PREPARED = """
local at = redis.call('HGET', KEYS[1], 'head')
local steps = tonumber(ARGV[4])
while at and at ~= '' and steps > 0 do
  if at == ARGV[1] then
    redis.call('SET', KEYS[3], ARGV[2], 'PX', ARGV[3])
    return 1
  end
  if redis.call('HGET', KEYS[2], at .. ':kind') ~= 'turn' then return 0 end
  at = redis.call('HGET', KEYS[2], at .. ':parent')
  steps = steps - 1
end
return 0
"""

# ARGV: id, consumed increment, ttl, write id, [msg json, tokens]...
APPEND = _FENCED + """
local id, consumed, ttl, write = ARGV[1], tonumber(ARGV[2]), ARGV[3], ARGV[4]
if redis.call('HGET', K_CP, id .. ':w') == write then  -- REPLAYED: its messages and inbox items are counted once
  return tonumber(redis.call('HGET', K_CP, id .. ':n'))
end
local status = redis.call('HGET', K_CP, id .. ':status')
if not status then return redis.error_reply('NOTFOUND checkpoint ' .. id .. ' does not exist') end
if status ~= 'running' then
  return redis.error_reply('TRANSITION checkpoint ' .. id .. ' is ' .. status .. '; only a running checkpoint takes messages')
end
local n = append(id, 5, #ARGV)
if consumed > 0 then redis.call('HINCRBY', K_CP, id .. ':consumed', consumed) end
redis.call('HSET', K_CP, id .. ':w', write)
touch(ttl)
return n
"""

# ARGV: id, expected head ('' for none), outcome json, now, ttl, write id, [last messages: json, tokens]... Returns
# {0, head} when the head moved, else {1, version, items left in the inbox, the checkpoint's record as LOAD gives it}.
COMMIT = _FENCED + """
local id, expected, outcome, now, ttl, write = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6]
local status = redis.call('HGET', K_CP, id .. ':status')
if not status then return redis.error_reply('NOTFOUND checkpoint ' .. id .. ' does not exist') end
local function answer()
  local out = {1, tonumber(redis.call('HGET', K_STATE, 'version')), redis.call('LLEN', K_INBOX)}
  local rec = redis.call('HMGET', K_CP, id .. ':meta', id .. ':status', id .. ':n', id .. ':tok', id .. ':out',
                         id .. ':consumed')
  for i = 1, 6 do out[#out + 1] = rec[i] or false end
  return out
end
if status == 'completed' and redis.call('HGET', K_CP, id .. ':w') == write then
  return answer()  -- REPLAYED: committed (and its inbox items trimmed) by the copy that ran first
end
if status ~= 'running' then
  return redis.error_reply('TRANSITION checkpoint ' .. id .. ' is ' .. status .. '; only a running checkpoint can complete')
end
local head = redis.call('HGET', K_STATE, 'head') or ''
if head ~= expected then return {0, head} end
if #ARGV > 6 then append(id, 7, #ARGV) end
redis.call('HSET', K_CP, id .. ':status', 'completed', id .. ':out', outcome, id .. ':w', write)
local consumed = tonumber(redis.call('HGET', K_CP, id .. ':consumed') or '0')
if consumed > 0 then redis.call('LTRIM', K_INBOX, consumed, -1) end
redis.call('HSET', K_STATE, 'head', id, 'updated_at', now)
if redis.call('HGET', K_STATE, 'active') == id then redis.call('HDEL', K_STATE, 'active') end
redis.call('HINCRBY', K_STATE, 'version', 1)
touch(ttl)
return answer()
"""

# ARGV: id, new status, outcome json ('' to keep), now, ttl, write id
TRANSITION = _FENCED + """
local id, new, outcome, now, ttl, write = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6]
local status = redis.call('HGET', K_CP, id .. ':status')
if not status then return redis.error_reply('NOTFOUND checkpoint ' .. id .. ' does not exist') end
if status == new and redis.call('HGET', K_CP, id .. ':w') == write then
  return status  -- REPLAYED: changed by the copy that ran first
end
local allowed = {
  running = {failed = true, awaiting_resume = true, superseded = true},
  awaiting_resume = {running = true, failed = true, superseded = true},
}
if not (allowed[status] and allowed[status][new]) then
  return redis.error_reply('TRANSITION checkpoint ' .. id .. ' is ' .. status .. '; it cannot become ' .. new)
end
redis.call('HSET', K_CP, id .. ':status', new, id .. ':w', write)
if outcome ~= '' then redis.call('HSET', K_CP, id .. ':out', outcome) end
if new == 'running' or new == 'awaiting_resume' then
  redis.call('HSET', K_STATE, 'active', id)
elseif redis.call('HGET', K_STATE, 'active') == id then
  redis.call('HDEL', K_STATE, 'active')
end
redis.call('HSET', K_STATE, 'updated_at', now)
touch(ttl)
return status
"""

# ARGV: expected head ('' for none), new head, now, ttl
CAS_HEAD = _FENCED + """
local expected, new, now, ttl = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local status = redis.call('HGET', K_CP, new .. ':status')
if status ~= 'completed' then
  return redis.error_reply('TRANSITION checkpoint ' .. new .. ' is ' .. tostring(status) .. '; the head must be a completed checkpoint')
end
local head = redis.call('HGET', K_STATE, 'head') or ''
if head ~= expected then return {0, head} end
redis.call('HSET', K_STATE, 'head', new, 'updated_at', now)
local version = redis.call('HINCRBY', K_STATE, 'version', 1)
touch(ttl)
return {1, version}
"""

# ARGV: ttl, [field, value]... Sets fields of the conversation's notes (the transport's flags, a turn's edits,
# deletions and pins): fenced like a checkpoint, so a worker whose lease another took writes none of them.
SET_NOTES = _FENCED + """
for i = 2, #ARGV, 2 do redis.call('HSET', K_NOTES, ARGV[i], ARGV[i + 1]) end
local ttl = tonumber(ARGV[1])
if ttl and ttl > 0 then redis.call('EXPIRE', K_NOTES, ttl) end
return 1
"""

_SEGMENT = """
local K_CP, K_MSGS = KEYS[2], KEYS[3]
local call = redis.call
local function gather(parts, fields)
  -- appends the messages stored under fields (in order) to parts, 500 to a command; false when one is missing
  local start, count, total = 1, #parts, #fields
  while start <= total do
    local stop_at = math.min(start + 499, total)
    local vals = call('HMGET', K_MSGS, unpack(fields, start, stop_at))
    for j = 1, #vals do
      local v = vals[j]
      if not v then return false end
      count = count + 1
      parts[count] = v
    end
    start = stop_at + 1
  end
  return true
end
local function walk(id, walk_limit, budget, first_stop)
  -- from id towards its epoch's start (a compaction or the first turn) until a stop (ARGV[first_stop..]) or
  -- the limits; returns the chain (newest first), its message counts and statuses, the stop and the next id
  local stops = {}
  for i = first_stop, #ARGV do stops[ARGV[i]] = true end
  local chain, counts, statuses, total, walked = {}, {}, {}, 0, 0
  local cur, stop, more = id, '', ''
  while true do
    if stops[cur] then stop = cur break end
    local f = call('HMGET', K_CP, cur .. ':n', cur .. ':kind', cur .. ':parent', cur .. ':status')
    local n = tonumber(f[1])
    if walked > 0 and (walked >= walk_limit or total + n > budget) then more = cur break end
    walked = walked + 1
    chain[walked], counts[walked], statuses[walked] = cur, n, f[4]
    total = total + n
    if f[2] == 'compaction' or not f[3] or f[3] == '' then break end
    cur = f[3]
  end
  return chain, counts, statuses, stop, more
end
local function rows_of(chain, counts, statuses, budget)
  -- one line per checkpoint, oldest first: "id status count included"
  local rows = {}
  for c = #chain, 1, -1 do
    rows[#chain - c + 1] = chain[c] .. ' ' .. tostring(statuses[c]) .. ' ' .. counts[c] .. ' ' ..
      (counts[c] <= budget and '1' or '0')
  end
  return table.concat(rows, '\\n')
end
local function fields_of(cids, counts)
  local fields, nfields = {}, 0
  for c = 1, #cids do
    local prefix = cids[c] .. ':'
    for j = 0, counts[c] - 1 do
      nfields = nfields + 1
      fields[nfields] = prefix .. j
    end
  end
  return fields
end
local function array_of(fields)
  local parts = {}
  if not gather(parts, fields) then return false end
  return '[' .. table.concat(parts, ',') .. ']'
end
"""

# ARGV: checkpoint id, most checkpoints to walk, most messages to return, K, K "stop" ids (checkpoints whose
# history the caller holds).
# Walks from the checkpoint towards its epoch's start until a stop, within one call's limits so that no call
# holds Redis for long: the caller continues from the returned next id (with WALK, then SEGMENTS).
# Returns {stop id or '', next id to walk from or '', the checkpoint's 6 record fields, the walked checkpoints
#          oldest first, one line each: "id status count included" (included 0: its messages alone exceed the
#          limit, read them with SEGMENT), and their messages as one JSON array (false when one is missing)}.
# Both lists are single strings: a reply item costs the client more than its bytes.
LOAD = _SEGMENT + """
local id, walk_limit, budget = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
if redis.call('HEXISTS', K_CP, id .. ':meta') == 0 then
  return redis.error_reply('NOTFOUND checkpoint ' .. id .. ' does not exist')
end
local chain, counts, statuses, stop, more = walk(id, walk_limit, budget, 5)
local out = {stop, more}
local rec = call('HMGET', K_CP, id .. ':meta', id .. ':status', id .. ':n', id .. ':tok', id .. ':out', id .. ':consumed')
for i = 1, 6 do out[#out + 1] = rec[i] or false end
out[#out + 1] = rows_of(chain, counts, statuses, budget)
local cids, ns = {}, {}
for c = #chain, 1, -1 do
  if counts[c] <= budget then
    cids[#cids + 1], ns[#ns + 1] = chain[c], counts[c]
  end
end
out[#out + 1] = array_of(fields_of(cids, ns))
return out
"""

# ARGV: checkpoint id, most checkpoints to walk, K, K "stop" ids. The walk alone (no messages): {stop id or '',
# next id or '', the lines as LOAD gives them, every checkpoint marked not included}.
WALK = _SEGMENT + """
local chain, counts, statuses, stop, more = walk(ARGV[1], tonumber(ARGV[2]), math.huge, 4)
return {stop, more, rows_of(chain, counts, statuses, -1)}
"""

# ARGV: checkpoint id, message count, ... (pairs). Their messages, in that order, as one JSON array (false when
# one is missing).
SEGMENTS = _SEGMENT + """
local cids, ns = {}, {}
for i = 1, #ARGV, 2 do
  cids[#cids + 1], ns[#ns + 1] = ARGV[i], tonumber(ARGV[i + 1])
end
return array_of(fields_of(cids, ns))
"""

# ARGV: checkpoint id, from, to. Its messages [from, to) as one JSON array, or false when one is missing.
SEGMENT = _SEGMENT + """
local fields = {}
for j = tonumber(ARGV[2]), tonumber(ARGV[3]) - 1 do fields[#fields + 1] = ARGV[1] .. ':' .. j end
return array_of(fields)
"""

# ARGV: where ('root', 'fork' or 'walk'), a checkpoint id, the fork being walked ('' else), most checkpoints to look at,
# R, R root ids, F, F fork ids (what the caller holds: a walk stops there).
# The epochs before a history, newest first, without their messages: from an epoch's first checkpoint (``root``) to
# the checkpoint its compaction forked from (the compaction's parent), then from there back along that epoch's turns
# to its own first checkpoint, and so on, until a root or a fork the caller holds, a first checkpoint that is no
# compaction, or the limit (the caller continues from where it stopped: ``walk`` within an epoch, ``root`` at one;
# ``fork`` begins at a fork the caller found itself).
# Returns {where to continue or '', the id to continue from, the fork being walked, the lines (one string, newest
# first: "R <root>" for each root looked at, "E <fork>" where an epoch begins, "<id> <status> <count>" for each of
# its checkpoints), then the 6 record fields of each fork begun, in order}.
EPOCHS = _SEGMENT + """
local where, at, fork, limit = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4])
local roots, forks = {}, {}
local nroots = tonumber(ARGV[5])
for i = 6, 5 + nroots do roots[ARGV[i]] = true end
for i = 7 + nroots, 6 + nroots + tonumber(ARGV[6 + nroots]) do forks[ARGV[i]] = true end
local lines, out, looked = {}, {'', '', ''}, 0
local function done(next_where, next_at, next_fork)
  out[1], out[2], out[3] = next_where, next_at, next_fork
  table.insert(out, 4, table.concat(lines, '\\n'))
  return out
end
while true do
  if where == 'root' then
    if roots[at] then return done('', '', '') end
    if looked >= limit then return done('root', at, '') end
    local f = call('HMGET', K_CP, at .. ':kind', at .. ':parent')
    looked = looked + 1
    if not f[1] then return redis.error_reply('NOTFOUND checkpoint ' .. at .. ' does not exist') end
    lines[#lines + 1] = 'R ' .. at
    if f[1] ~= 'compaction' or not f[2] or f[2] == '' then return done('', '', '') end
    if forks[f[2]] then
      lines[#lines + 1] = 'K ' .. f[2]  -- (the walk stops at a fork it was told it knows)
      return done('', '', '')
    end
    at, where = f[2], 'fork'
  end
  if where == 'fork' then
    fork, where = at, 'walk'
    lines[#lines + 1] = 'E ' .. fork
    local rec = call('HMGET', K_CP, fork .. ':meta', fork .. ':status', fork .. ':n', fork .. ':tok', fork .. ':out',
                     fork .. ':consumed')
    for i = 1, 6 do out[#out + 1] = rec[i] or false end
  end
  while true do
    if looked >= limit then return done('walk', at, fork) end
    local f = call('HMGET', K_CP, at .. ':n', at .. ':kind', at .. ':parent', at .. ':status')
    looked = looked + 1
    if not f[1] then return redis.error_reply('NOTFOUND checkpoint ' .. at .. ' does not exist') end
    lines[#lines + 1] = at .. ' ' .. tostring(f[4]) .. ' ' .. f[1]
    if f[2] == 'compaction' or not f[3] or f[3] == '' then break end
    at = f[3]
  end
  where = 'root'
end
"""

# ARGV: item json, dedup ttl, retention ttl, now, [front]; dedup keys in KEYS after 6. With ``front`` the item
# goes to the head of the inbox (only while no turn holds items: a turn counts what it takes from the head).
ENQUEUE = _PRELUDE + """
local item, dedup_ttl, ttl, now = ARGV[1], tonumber(ARGV[2]), ARGV[3], ARGV[4]
for i = 7, #KEYS do
  if redis.call('EXISTS', KEYS[i]) == 1 then return 0 end
end
for i = 7, #KEYS do redis.call('SET', KEYS[i], '1', 'EX', dedup_ttl) end
local len
if ARGV[5] == 'front' then len = redis.call('LPUSH', K_INBOX, item) else len = redis.call('RPUSH', K_INBOX, item) end
if redis.call('HSETNX', K_STATE, 'created_at', now) == 1 then
  redis.call('HSET', K_STATE, 'version', 0)
end
redis.call('HSET', K_STATE, 'updated_at', now)
if ARGV[6] and ARGV[6] ~= '' then  -- the transport's flags for the conversation, set with its item
  local flags = cjson.decode(ARGV[6])
  for name, value in pairs(flags) do redis.call('HSET', K_NOTES, 'flag:' .. name, cjson.encode(value)) end
end
touch(ttl, 6)  -- not the dedup keys: they live dedup_ttl, not the retention
return len
"""

# KEYS: the conversation's durable keys, then its lease. ARGV: lease token, lease ms, 'acquire' or 'renew'.
# What a worker needs to start a turn, in one step: the lease taken (or renewed: the holder's next turn), the
# state, the active checkpoint's record and the waiting inbox items (after those a paused turn already took).
# Returns {0} when the lease is held by another worker (or was lost), else
#         {1, state {head, active, version, created_at, updated_at}, active record (6 fields), inbox start, items}.
BEGIN = """
local K_STATE, K_CP, K_INBOX, K_NOTES, K_LEASE = KEYS[1], KEYS[2], KEYS[5], KEYS[6], KEYS[7]
local token, ms = ARGV[1], ARGV[2]
local held = redis.call('GET', K_LEASE)
if ARGV[3] == 'acquire' and held ~= token then  -- (a token is new to every acquire: held, it was REPLAYED)
  if not redis.call('SET', K_LEASE, token, 'NX', 'PX', ms) then return {0} end
elseif held == token then
  redis.call('PEXPIRE', K_LEASE, ms)
else
  return {0}
end
local state = redis.call('HMGET', K_STATE, 'head', 'active', 'version', 'created_at', 'updated_at')
local rec, start = {}, 0
local active = state[2]
if active then
  rec = redis.call('HMGET', K_CP, active .. ':meta', active .. ':status', active .. ':n', active .. ':tok',
                   active .. ':out', active .. ':consumed')
  if rec[2] == 'awaiting_resume' then start = tonumber(rec[6] or '0') end
end
return {1, state, rec, start, redis.call('LRANGE', K_INBOX, start, -1), redis.call('HGETALL', K_NOTES)}
"""

# KEYS: a lease. ARGV: a new token, ms. Takes the lease when nobody holds it: 1, or 0 when another holder has it
# (a copy of this very take, REPLAYED after the first ran, finds its own token: 1).
TAKE_LEASE = """
local held = redis.call('GET', KEYS[1])
if held == ARGV[1] then return 1 end
if held then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1
"""

RENEW_LEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
"""

RELEASE_LEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
"""

# KEYS: lease, inbox. ARGV: token. Releases the lease when the inbox is empty and the lease still the holder's:
# returns the number of waiting items (the lease kept), 0 (released) or -1 (no longer the holder's).
RELEASE_IF_DRAINED = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return -1 end
local waiting = redis.call('LLEN', KEYS[2])
if waiting == 0 then redis.call('DEL', KEYS[1]) end
return waiting
"""

# KEYS: inbox, dead letters. ARGV: index, the raw item read there, ttl. Moves that one item, if it is still
# there, from the inbox to the dead letters; returns 1, or 0 when the inbox changed meanwhile.
QUARANTINE = """
if redis.call('LINDEX', KEYS[1], ARGV[1]) ~= ARGV[2] then return 0 end
redis.call('RPUSH', KEYS[2], ARGV[2])
redis.call('EXPIRE', KEYS[2], ARGV[3])
redis.call('LSET', KEYS[1], ARGV[1], '__threadkeeper_quarantined__')
redis.call('LREM', KEYS[1], 1, '__threadkeeper_quarantined__')
return 1
"""

# KEYS: dead letters, inbox. ARGV: the raw item, ttl. Moves one copy of that item, if it is still set aside, to the
# end of the inbox; returns 1, or 0 when it was no longer there (retried by someone else).
REQUEUE = """
if redis.call('LREM', KEYS[1], 1, ARGV[1]) == 0 then return 0 end
redis.call('RPUSH', KEYS[2], ARGV[1])
redis.call('EXPIRE', KEYS[2], ARGV[2])
return 1
"""
