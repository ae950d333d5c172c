import { createHash } from 'node:crypto';

/** A Lua script with its SHA-1, so it can be run by EVALSHA and loaded by EVAL only when missing. */
export interface RedisScript {
  /** Lua source, sent with EVAL when the server answers NOSCRIPT. */
  readonly source: string;
  /** SHA-1 of the source in hex, as EVALSHA wants it. */
  readonly sha: string;
}

/** A script of `source`, with its SHA-1. */
export function script(source: string): RedisScript {
  return { source, sha: createHash('sha1').update(source).digest('hex') };
}

/**
 * A record is one Redis string (see codec.ts): `o1|` then these fields joined by '|', the result
 * last because it is the only one that may itself contain '|'. One string instead of a hash
 * because Redis then does one command per write: an insert is a single SET NX GET, and a
 * conditional write a GET and a SET, where a hash needed seven commands for the pair. A settled
 * record is `o2|` then the same fields with its settlement (JSON without '|') before the result:
 * a record never settled keeps the `o1|` form, byte for byte as before settlements existed.
 */
export const FIELDS = [
  'state',
  'fence',
  'leaseUntil',
  'expiresAt',
  'attempts',
  'createdAt',
  'updatedAt',
  'completedAt',
  'fingerprint',
  'traceId',
  'result',
] as const;

/** The version tag every record starts with; a string without it (or SETTLED_TAG) is not ours. */
export const TAG = 'o1|';
/** The tag of a record that carries a settlement (a field before the result). */
export const SETTLED_TAG = 'o2|';

/**
 * The states with an index: a set per state, `<prefix>i:<state>`, whose members are the record
 * keys (`<prefix>r:...`, see recordKey in codec.ts). Operators look for exactly these records (waiting for a person,
 * stalled), and they are few beside the finished ones, so listing them reads the index, never the
 * keyspace. A set, not a sorted set: SADD and SREM on a hashtable cost Redis about a fifth of
 * ZADD and ZREM on a small sorted set (a listpack, searched and shifted byte by byte), and a claim
 * and its completion pay that on every first execution; listing pages by SSCAN instead of by key
 * order. Every script that writes a record takes both index keys first in KEYS, in this order,
 * and keeps them exact in the same run.
 */
export const INDEXED_STATES = ['in_progress', 'unknown'] as const;
/** How many index keys come before the record keys in the KEYS of INSERT, INSERT_GIVEN and UPDATE. */
export const INDEX_KEYS = INDEXED_STATES.length;

/** ARGV slots per key of INSERT (see there). */
export const INSERT_SLOTS = 2;
/** ARGV slots per key of INSERT_GIVEN (see there). */
export const INSERT_GIVEN_SLOTS = 2;
/** ARGV slots per key of UPDATE (see there). */
export const UPDATE_SLOTS = 5;

// One capture per field; '' is a null. A settled record has one more field, before the result.
const HEAD = FIELDS.slice(0, -1);
const PATTERN = `'^o1|${HEAD.map(() => '([^|]*)|').join('')}(.*)$'`;
const SETTLED_PATTERN = `'^o2|${HEAD.map(() => '([^|]*)|').join('')}([^|]*)|(.*)$'`;

/**
 * How long an in_progress record outlives its lease, whatever its TTL: a claim whose holder
 * vanished stays visible this long after the lease, so the next caller takes it over (same trace,
 * attempt + 1, fence + 1) rather than finding the key gone.
 */
export const LEASE_MARGIN_MS = 60_000;

// Shared by every script that writes. `now` is Redis's own clock (TIME, read once per script
// run, not per key), so leases and expiries of every process are measured by one clock, however
// far theirs are off; scripts calling TIME are fine since Redis 5 replicates their effects, not
// the script. A relative time (ms from now, as a string) becomes its stored string through
// `at`, which formats each distinct duration once per run (a batch's records mostly share their
// lease and TTL; printing a number is the costly part of building a record): '' stays '' (a
// null), '~' stays '~' (a patch keeps the field), '0' is now itself. %.0f because Lua numbers
// are doubles, exact for epoch ms and µs, and tostring() prints 14 digits (µs in an exponent).
//
// The expiry rule, so Redis drops a record exactly when the engine would stop answering with it.
// An unknown record waits for a person and an empty expiresAt means permanent: neither may vanish
// (a SET without PXAT keeps no expiry). An in_progress record outlives its lease by
// LEASE_MARGIN_MS even when the TTL is shorter, or a live claim would disappear and a duplicate
// would run. A time already past makes Redis drop the key at once, which is what an expired
// record means. A value that is not an oncely record is left alone and reported. The inserts'
// callers compute this rule themselves (codec.ts, expiryOf) and send its time; UPDATE applies it
// to the record it built.
const FOREIGN = `
local function foreign(key)
  return { err = 'the value at ' .. key .. ' is not an oncely record' }
end
local function ours(value)
  local tag = string.sub(value, 1, 3)
  return tag == '${TAG}' or tag == '${SETTLED_TAG}'
end
`;

// The index keys (KEYS[1] and KEYS[2], see INDEXED_STATES) by state. A member is the record's
// key itself, as Redis sees it (a client's own key prefix included), so indexing a record makes
// no new string. A run collects the members to add and to remove per index key and applies them
// at its end, one SADD and one SREM per index key: a call from Lua into Redis costs more than the
// command itself (measured: some 2 µs each, where the SADD of 8 members takes 2.5), and a run holds
// up to 8 records. The hot path (a claim joins in_progress, its completion leaves it) checks no
// type first: an index key holding another type fails that SADD or SREM, after the records were
// written (scripts are not rolled back), so the run then undoes those records (an insert is
// deleted again, a completion's record put back as it was, expiry included) and answers each
// with the error, not written. A write that moves a record into an index from another state's
// (rare: a record turning unknown, a released key claimed again) checks both keys by TYPE before
// it writes (once per run). Measured, the bookkeeping of a table per record cost Redis more than
// the set commands, so there is none (see UPDATE for the one case that needs order).
const INDEX = `
local index = { ${INDEXED_STATES.map((state, i) => `${state} = KEYS[${i + 1}]`).join(', ')} }
local adds = {}
local function push(lists, k, key)
  local l = lists[k]
  if l then l[#l + 1] = key else lists[k] = { key } end
end
local function refusal(k)
  return { err = 'the value at ' .. k .. ' is not an oncely index' }
end
-- The SADDs of the members collected; the members an index key of another type refused, by key,
-- as their error (nil when none did).
local function add_members()
  local failed
  for k, l in pairs(adds) do
    if type(redis.pcall('SADD', k, unpack(l))) == 'table' then
      failed = failed or {}
      for _, key in ipairs(l) do failed[key] = refusal(k) end
    end
  end
  adds = {}
  return failed
end
`;

// The inserts an index key of another type refused (add_members) are undone: each key was absent
// before this run, so deleting it again restores it exactly, and every answer for that key in the
// run is the error (a later copy of the key found the record just undone).
const UNDO_INSERTS = `
local function undo_inserts(out, failed)
  if not failed then return end
  for i = 1, #KEYS - ${INDEX_KEYS} do
    local r = failed[KEYS[i + ${INDEX_KEYS}]]
    if r then out[i] = r end
  end
  for key in pairs(failed) do redis.call('DEL', key) end
end
`;

const CLOCK = `${FOREIGN}${INDEX}
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
local printed = { [''] = '', ['~'] = '~', ['0'] = string.format('%.0f', now) }
local function at(v)
  local s = printed[v]
  if s then return s end
  s = string.format('%.0f', now + tonumber(v))
  printed[v] = s
  return s
end
`;

// Every script handles its keys one after the other, as separate calls would in that order, and
// answers one element per key. A command error on one key (a foreign value of another type at
// that key) is caught with redis.pcall and returned as that key's element, a nested error reply:
// an uncaught error would abort the script after the earlier keys were already written (Lua
// scripts are atomic but not rolled back), and retrying those keys would misreport them. A key
// given twice in one run is handled twice, in order: as two calls in that order would.

/**
 * Insert if absent, for records whose times are ms from Redis's now (the engine's claims).
 * The caller sends each record in two pieces, its shape (the fields but the texts, with its
 * expiry) and its texts, so per key Lua parses nothing: a run's claims mostly share one shape,
 * which is read and printed once per run (times, fence), and each value is that shape's string
 * joined with the record's texts. It is written with one `SET key value NX GET [PXAT at]`,
 * which answers the existing value instead when the key is taken (and then writes nothing); an
 * in_progress or unknown record inserted joins its state's index (one SADD per run).
 * A new claim's fence starts at Redis's clock in microseconds, so fences never go back: a
 * record that expired leaves nothing behind, and the key's next claim must still outrank every
 * fence a stalled holder of an earlier one may carry. Within one record fences grow by one per
 * takeover, and each takeover takes a round trip (more than a microsecond), so a record's fences
 * stay below the clock, and its successor starts above them. No counter key is kept per record.
 *
 * KEYS: the index keys (INDEXED_STATES), then the record keys.
 * ARGV, INSERT_SLOTS per record key: the shape
 *   `state|fence|leaseUntil|expiresAt|attempts|createdAt|updatedAt|completedAt|expiry`, where
 *   the fence stored is the larger of the one given and now in µs, the expiry is the PXAT by the
 *   rule above, and every time is ms from now ('' a null, or no expiry); then the texts
 *   `|fingerprint|traceId|result`, or `#|fingerprint|traceId|settlement|result` for a settled record.
 * Answers: per key, the fence stored (an integer) when inserted, else the existing record's
 *   string, or an error (a foreign value); then Redis's now in ms.
 */
export const INSERT = script(`${CLOCK}${UNDO_INSERTS}
local now_us = string.format('%.0f', tonumber(clock[1]) * 1000000 + tonumber(clock[2]))
local n_us = tonumber(now_us)
local shapes = {}
local function shaped(shape)
  local s = shapes[shape]
  if s then return s end
  local state, fence, lease, expires, attempts, created, updated, completed, expiry =
    string.match(shape, '^([^|]*)|([^|]*)|([^|]*)|([^|]*)|([^|]*)|([^|]*)|([^|]*)|([^|]*)|([^|]*)$')
  if n_us > tonumber(fence) then fence = now_us end
  local body = state .. '|' .. fence .. '|' .. at(lease) .. '|' .. at(expires) .. '|' .. attempts .. '|'
    .. at(created) .. '|' .. at(updated) .. '|' .. at(completed)
  s = { '${TAG}' .. body, tonumber(fence), expiry ~= '' and at(expiry), body, index[state] }
  shapes[shape] = s
  return s
end
local out = {}
for i = 1, #KEYS - ${INDEX_KEYS} do
  local key = KEYS[i + ${INDEX_KEYS}]
  local s = shaped(ARGV[${INSERT_SLOTS} * i - 1])
  local texts = ARGV[${INSERT_SLOTS} * i]
  local value
  if string.byte(texts, 1) == 35 then value = '${SETTLED_TAG}' .. s[4] .. string.sub(texts, 2)
  else value = s[1] .. texts end
  local old
  if s[3] then old = redis.pcall('SET', key, value, 'NX', 'GET', 'PXAT', s[3])
  else old = redis.pcall('SET', key, value, 'NX', 'GET') end
  if not old then
    out[i] = s[2]
    if s[5] then push(adds, s[5], key) end
  elseif type(old) == 'table' or ours(old) then out[i] = old
  else out[i] = foreign(key) end
end
undo_inserts(out, add_members())
out[#out + 1] = now
return out
`);

/**
 * Insert if absent, for records whose times are absolute, stored as given; an in_progress or
 * unknown record inserted joins its state's index.
 *
 * KEYS: the index keys (INDEXED_STATES), then the record keys.
 * ARGV, INSERT_GIVEN_SLOTS per record key: the encoded record; its expiry (PXAT, by the rule
 *   above), '' for none.
 * Answers: per key, 0 when inserted, else the existing record's string, or an error (a
 *   foreign value); then Redis's now in ms.
 */
export const INSERT_GIVEN = script(`${CLOCK}${UNDO_INSERTS}
local out = {}
for i = 1, #KEYS - ${INDEX_KEYS} do
  local key = KEYS[i + ${INDEX_KEYS}]
  local value, expiry = ARGV[${INSERT_GIVEN_SLOTS} * i - 1], ARGV[${INSERT_GIVEN_SLOTS} * i]
  local old
  if expiry == '' then old = redis.pcall('SET', key, value, 'NX', 'GET')
  else old = redis.pcall('SET', key, value, 'NX', 'GET', 'PXAT', expiry) end
  if not old then
    out[i] = 0
    local to = index[string.match(value, '^o[12]|([^|]*)|')]
    if to then push(adds, to, key) end
  elseif type(old) == 'table' or ours(old) then out[i] = old
  else out[i] = foreign(key) end
end
undo_inserts(out, add_members())
out[#out + 1] = now
return out
`);

/**
 * Conditional writes. Writes to one key are applied in order, each checked against the record
 * the previous one left: the same as separate calls in that order, so one run may carry several
 * per key. Each write comes as its shape (the checks and the patch's state and times), which a
 * run's writes mostly share and Lua reads and prints once per run, and its per-record parts; the
 * stored record is parsed, and only the fields the patch sets are replaced. A write that changes
 * the state moves the record between indexes (from the old state's, to the new one's, where
 * those states have one), applied at the end of the run.
 *
 * KEYS: the index keys (INDEXED_STATES), then the record keys.
 * ARGV, UPDATE_SLOTS per record key:
 *   1. the expected fence;
 *   2. the expected lease (when the lease check is '2', else '');
 *   3. the shape `check|states|relative|state|leaseUntil|expiresAt|createdAt|updatedAt|completedAt`:
 *      the lease check ('0' none, '1' the lease must be null, '2' it must equal the expected
 *      lease), the allowed states joined by ',', '1' when the patch's times are ms from Redis's
 *      now ('0' absolute), then the patch's state and times;
 *   4. the patch's `fence|attempts|fingerprint|traceId|settlement` (the settlement's JSON, '' to remove it);
 *   5. the patch's result.
 *   A patch field is '~' where the patch keeps it, '' for a null.
 * Answers: per key, Redis's now in ms when the write applied (what its relative times count
 *   from; for a terminal write found already applied, the now it applied at), 0 when the record
 *   is missing or did not match, or an error (a foreign value).
 */
export const UPDATE = script(`${CLOCK}
local rems, checked = {}, {}
local function foreign_index(k)
  if not k then return nil end
  local c = checked[k]
  if c == nil then
    local t = redis.call('TYPE', k).ok
    c = t ~= 'set' and t ~= 'none' and refusal(k)
    checked[k] = c
  end
  return c or nil
end
-- The moves collected since the last were applied: each moved key's value before its move, and
-- the first record (in KEYS) since then. A record moved a second time in one run has the moves so
-- far applied first, so the two land in the order of the writes (in_progress to unknown to
-- succeeded leaves it in neither index).
local moved, since, current = {}, 1, 1
local out = {}
-- Puts a record back as it was before this run moved it: its value, and its expiry by the rule.
local function restore(key, before)
  local state, lease, expires = string.match(before, '^o[12]|([^|]*)|[^|]*|([^|]*)|([^|]*)|')
  local expiry = nil
  if state ~= 'unknown' and expires ~= '' then
    expiry = expires
    if state == 'in_progress' and lease ~= '' then
      local keep = tonumber(lease) + ${LEASE_MARGIN_MS}
      if keep > tonumber(expires) then expiry = string.format('%.0f', keep) end
    end
  end
  if expiry then redis.call('SET', key, before, 'PXAT', expiry) else redis.call('SET', key, before) end
end
-- The SREMs, then the SADDs (their keys checked by TYPE before the writes). A record an SREM
-- refused (its index key of another type) is put back, and every answer for its key since the
-- last moves is the error.
local function apply_moves(upto)
  local failed
  for k, l in pairs(rems) do
    if type(redis.pcall('SREM', k, unpack(l))) == 'table' then
      failed = failed or {}
      for _, key in ipairs(l) do failed[key] = refusal(k) end
    end
  end
  for k, l in pairs(adds) do redis.call('SADD', k, unpack(l)) end
  if failed then
    for key in pairs(failed) do restore(key, moved[key]) end
    for i = since, upto do
      local r = failed[KEYS[i + ${INDEX_KEYS}]]
      if r then out[i] = r end
    end
  end
  adds, rems, moved, since = {}, {}, {}, upto + 1
  return failed
end
-- A write that moves its record; answers an error when it may not be written: the record's earlier
-- move in this run was refused, and it is put back, so this write was checked against a value undone.
local function move(key, before, from, to)
  if moved[key] then
    local failed = apply_moves(current - 1)
    if failed and failed[key] then return failed[key] end
  end
  moved[key] = before
  if from then push(rems, from, key) end
  if to then push(adds, to, key) end
end
local shapes = {}
local function shaped(shape)
  local s = shapes[shape]
  if s then return s end
  local check, states, relative, state, lease, expires, created, updated, completed =
    string.match(shape, '^([^|]*)|([^|]*)|([^|]*)|([^|]*)|([^|]*)|([^|]*)|([^|]*)|([^|]*)|([^|]*)$')
  if relative == '1' then
    lease, expires, created, updated, completed = at(lease), at(expires), at(created), at(updated), at(completed)
  end
  local allowed = {}
  for name in string.gmatch(states, '[^,]+') do allowed[name] = true end
  s = { check, allowed, state, lease, expires, created, updated, completed, relative == '1' }
  shapes[shape] = s
  return s
end
local patches = {}
local function parts(text)
  local p = patches[text]
  if p then return p end
  p = { string.match(text, '^([^|]*)|([^|]*)|([^|]*)|([^|]*)|([^|]*)$') }
  patches[text] = p
  return p
end
-- A terminal write sent again after it applied (ioredis resends a command whose connection
-- closed, as in a failover; the engine retries a completion that timed out) finds its own outcome
-- stored: the fence it expects (checked before, and a fence has one holder), the state it sets,
-- its result, texts and settlement. It answers applied, with the clock of the first write (its
-- relative updatedAt counted back), rather than refused, which the engine would take for a lost lease.
local done = { succeeded = true, failed = true, released = true }
local function repeated(s, patch, r, state, attempts, fingerprint, traceId, settlement, result, updatedAt)
  if s[3] ~= state or not done[state] or (r ~= '~' and r ~= result) then return 0 end
  local p = parts(patch)
  if p[1] ~= '~' or (p[2] ~= '~' and p[2] ~= attempts) or (p[3] ~= '~' and p[3] ~= fingerprint)
    or (p[4] ~= '~' and p[4] ~= traceId) or (p[5] ~= '~' and p[5] ~= settlement) or (p[5] == '~' and settlement ~= '')
  then return 0 end
  if s[9] and s[7] ~= '~' then return tonumber(updatedAt) - (tonumber(s[7]) - now) end
  return now
end
local function update(key, b)
  local value = redis.pcall('GET', key)
  if not value then return 0 end
  if type(value) == 'table' then return value end
  local ${FIELDS.join(', ')} = string.match(value, ${PATTERN})
  local settlement = ''
  if not state then
    ${HEAD.join(', ')}, settlement, result = string.match(value, ${SETTLED_PATTERN})
    if not state then return foreign(key) end
  end
  local was, before = state, value
  local e = ARGV[b + 1]
  if fence ~= e and tonumber(fence) ~= tonumber(e) then return 0 end
  local s = shaped(ARGV[b + 3])
  if not s[2][state] then return repeated(s, ARGV[b + 4], ARGV[b + 5], state, attempts, fingerprint, traceId, settlement, result, updatedAt) end
  if s[1] == '1' and leaseUntil ~= '' then return 0 end
  if s[1] == '2' then
    e = ARGV[b + 2]
    if leaseUntil == '' or (leaseUntil ~= e and tonumber(leaseUntil) ~= tonumber(e)) then return 0 end
  end
  if s[3] ~= '~' then state = s[3] end
  if s[4] ~= '~' then leaseUntil = s[4] end
  if s[5] ~= '~' then expiresAt = s[5] end
  if s[6] ~= '~' then createdAt = s[6] end
  if s[7] ~= '~' then updatedAt = s[7] end
  if s[8] ~= '~' then completedAt = s[8] end
  local p = parts(ARGV[b + 4])
  if p[1] ~= '~' then fence = p[1] end
  if p[2] ~= '~' then attempts = p[2] end
  if p[3] ~= '~' then fingerprint = p[3] end
  if p[4] ~= '~' then traceId = p[4] end
  if p[5] ~= '~' then settlement = p[5] end
  e = ARGV[b + 5]
  if e ~= '~' then result = e end
  if settlement == '' then value = '${TAG}' .. ${FIELDS.join(" .. '|' .. ")}
  else value = '${SETTLED_TAG}' .. ${HEAD.join(" .. '|' .. ")} .. '|' .. settlement .. '|' .. result end
  local expiry = nil
  if state ~= 'unknown' and expiresAt ~= '' then
    expiry = expiresAt
    if state == 'in_progress' and leaseUntil ~= '' then
      local keep = tonumber(leaseUntil) + ${LEASE_MARGIN_MS}
      if keep > tonumber(expiresAt) then expiry = string.format('%.0f', keep) end
    end
  end
  local from, to = index[was], index[state]
  if from ~= to then
    if to then
      local refused = foreign_index(from) or foreign_index(to)
      if refused then return refused end
    end
    local refused = move(key, before, from, to)
    if refused then return refused end
  end
  if expiry then redis.call('SET', key, value, 'PXAT', expiry) else redis.call('SET', key, value) end
  return now
end
for i = 1, #KEYS - ${INDEX_KEYS} do
  current = i
  out[i] = update(KEYS[i + ${INDEX_KEYS}], ${UPDATE_SLOTS} * (i - 1))
end
apply_moves(#KEYS - ${INDEX_KEYS})
return out
`);

/**
 * Reads many records. A script rather than MGET because MGET reads a key of another type as
 * absent, and a foreign value must be reported, not overwritten by a later insert.
 *
 * KEYS: the record keys.
 * ARGV: none.
 * Answers: per key, 0 when absent, else the record's string, or an error (a foreign value).
 */
export const GET = script(`${FOREIGN}
local out = {}
for i = 1, #KEYS do
  local value = redis.pcall('GET', KEYS[i])
  if not value then out[i] = 0
  elseif type(value) == 'table' then out[i] = value
  elseif not ours(value) then out[i] = foreign(KEYS[i])
  else out[i] = value end
end
return out
`);
