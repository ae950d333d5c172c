import { createHash } from 'node:crypto';

/** A Lua script with its SHA-1, so it can be run by EVALSHA and loaded by EVAL only when missing. */
export interface RedisScript {
  /** Lua source, sent with EVAL when the server answers NOSCRIPT. */
  readonly source: string;
  /** SHA-1 of the source in hex, as EVALSHA wants it. */
  readonly sha: string;
}

function script(source: string): RedisScript {
  return { source, sha: createHash('sha1').update(source).digest('hex') };
}

/**
 * A record is one Redis string (see codec.ts): `o1|` then these fields joined by '|', the result
 * last because it is the only one that may itself contain '|'. One string instead of a hash
 * because Redis then does one command per write: an insert is a single SET NX GET, and a
 * conditional write a GET and a SET, where a hash needed seven commands for the pair.
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

/** The version tag every record starts with; a string without it is not ours. */
export const TAG = 'o1|';

// The UPDATE script's Lua locals: each field under its own name, and the patch's as `p_<name>`.
// Locals rather than tables: one string.match fills them with no table built, and one
// concatenation joins them again (about 1 µs less per write).
const PATCHED = FIELDS.map((name) => `p_${name}`);

// The time fields; a relative write gives each as ms from Redis's now.
const TIMES = ['leaseUntil', 'expiresAt', 'createdAt', 'updatedAt', 'completedAt'] as const;

// One capture per field; '' is a null.
const PATTERN = `'^o1|${FIELDS.map((_, i) => (i === FIELDS.length - 1 ? '(.*)' : '([^|]*)|')).join('')}$'`;

/**
 * How long an in_progress record outlives its lease, whatever its TTL: a claim whose holder
 * vanished stays visible this long after the lease, so the next caller takes it over (same trace,
 * attempt + 1, fence + 1) rather than finding the key gone.
 */
export const LEASE_MARGIN_MS = 60_000;

// Shared by every script. `now` is Redis's own clock (TIME), so leases and expiries of every
// process are measured by one clock, however far theirs are off; scripts calling TIME are fine
// since Redis 5 replicates their effects, not the script. Times are written back with %.0f: Lua
// numbers are doubles, exact for epoch ms, and tostring() could print an exponent.
//
// The expiry rule, so Redis drops a record exactly when the engine would stop answering with it.
// An unknown record waits for a person and an empty expiresAt means permanent: neither may vanish
// (a SET without PXAT keeps no expiry). An in_progress record outlives its lease by
// LEASE_MARGIN_MS even when the TTL is shorter, or a live claim would disappear and a duplicate
// would run. A time already past makes Redis drop the key at once, which is what an expired
// record means. A value that is not an oncely record is left alone and reported.
const FOREIGN = `
local function foreign(key)
  return { err = 'the value at ' .. key .. ' is not an oncely record' }
end
`;

const PRELUDE = `${FOREIGN}
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
local now_us = tonumber(clock[1]) * 1000000 + tonumber(clock[2])
local function ms(x) return string.format('%.0f', x) end
local function from_now(v) if v == '' or v == '~' then return v end return ms(now + tonumber(v)) end
local function expiry(state, lease, expires)
  if state == 'unknown' or expires == '' then return nil end
  if state == 'in_progress' and lease ~= '' then
    local keep = tonumber(lease) + ${LEASE_MARGIN_MS}
    if keep > tonumber(expires) then return ms(keep) end
  end
  return expires
end
`;

// Every script handles its keys one after the other, as separate calls would in that order, and
// answers one element per key. A command error on one key (a foreign value of another type at
// that key) is caught with redis.pcall and returned as that key's element, a nested error reply:
// an uncaught error would abort the script after the earlier keys were already written (Lua
// scripts are atomic but not rolled back), and retrying those keys would misreport them.

/**
 * Insert if absent, for many records. KEYS the record keys; per key, two ARGV: the encoded
 * record, and '1' when it is a new claim whose times are ms from Redis's now ('0': absolute, as
 * given). A new claim's fence starts at Redis's clock in microseconds, so fences never go back: a
 * record that expired leaves nothing behind, and the key's next claim must still outrank every
 * fence a stalled holder of an earlier one may carry. Within one record fences grow by one per
 * takeover, and each takeover takes a round trip (more than a microsecond), so a record's fences
 * stay below the clock, and its successor starts above them. No counter key is kept per record.
 * Answers per key: a one-element array holding the fence stored when inserted (its times are
 * the given durations from `now`), else the existing record's string, or an error; then one last
 * element, Redis's now in ms. A key given
 * twice is inserted by the first and returned to the second, as two calls in that order would.
 */
export const INSERT = script(`${PRELUDE}
local out = {}
-- A read first: a duplicate (the common case of a key that exists) then costs one GET, and only
-- a new record is parsed, given its times and fence, and written (the script is atomic).
for i = 1, #KEYS do
  local old = redis.pcall('GET', KEYS[i])
  if type(old) == 'table' then out[i] = old
  elseif old then
    if string.sub(old, 1, 3) ~= 'o1|' then out[i] = foreign(KEYS[i]) else out[i] = old end
  else
    local value = ARGV[2 * i - 1]
    local ${FIELDS.join(', ')} = string.match(value, ${PATTERN})
    if ARGV[2 * i] == '1' then
${TIMES.map((name) => `      ${name} = from_now(${name})`).join('\n')}
      if now_us > tonumber(fence) then fence = ms(now_us) end
      value = '${TAG}' .. ${FIELDS.join(" .. '|' .. ")}
    end
    local at = expiry(state, leaseUntil, expiresAt)
    if at then redis.call('SET', KEYS[i], value, 'PXAT', at) else redis.call('SET', KEYS[i], value) end
    out[i] = { fence }
  end
end
out[#KEYS + 1] = now
return out
`);

/**
 * Conditional writes, for many records. KEYS the record keys; per key, two ARGV:
 *   1. the expectation: fence, lease check ('0' none, '1' lease must be null, '2' lease must
 *      equal the expected lease), expected lease, '1' when the patch's times are ms from Redis's
 *      now ('0' absolute), then '|' and the allowed states each followed by '|', all joined by '|'
 *      (`3|0||1||in_progress|unknown|`);
 *   2. the patch: a record in the stored layout where '~' keeps a field as it is.
 * Answers per key: Redis's now in ms when the write applied (what its relative times count from),
 * 0 when the record is missing or did not match, or an error. Writes to one key are applied in
 * order, each checked against the record the previous one left: the same as separate calls in
 * that order, so one batch may carry several per key.
 */
export const UPDATE = script(`${PRELUDE}
local function update(key, expect, patch)
  local value = redis.pcall('GET', key)
  if not value then return 0 end
  if type(value) == 'table' then return value end
  local ${FIELDS.join(', ')} = string.match(value, ${PATTERN})
  if not state then return foreign(key) end
  local e_fence, e_check, e_lease, e_relative, e_states = string.match(expect, '^([^|]*)|([^|]*)|([^|]*)|([^|]*)|(.*)$')
  if tonumber(fence) ~= tonumber(e_fence) then return 0 end
  if not string.find(e_states, '|' .. state .. '|', 1, true) then return 0 end
  if e_check == '1' and leaseUntil ~= '' then return 0 end
  if e_check == '2' and (leaseUntil == '' or tonumber(leaseUntil) ~= tonumber(e_lease)) then return 0 end
  local ${PATCHED.join(', ')} = string.match(patch, ${PATTERN})
  if e_relative == '1' then
${TIMES.map((name) => `    p_${name} = from_now(p_${name})`).join('\n')}
  end
${FIELDS.map((name, i) => `  if ${PATCHED[i]} ~= '~' then ${name} = ${PATCHED[i]} end`).join('\n')}
  local at = expiry(state, leaseUntil, expiresAt)
  value = '${TAG}' .. ${FIELDS.join(" .. '|' .. ")}
  if at then redis.call('SET', key, value, 'PXAT', at) else redis.call('SET', key, value) end
  return now
end
local out = {}
for i = 1, #KEYS do
  out[i] = update(KEYS[i], ARGV[2 * i - 1], ARGV[2 * i])
end
return out
`);

/**
 * Reads many records. KEYS the record keys. Answers per key: 0 when absent, else the record's
 * string, or an error. A script rather than MGET because MGET reads a key of another type as
 * absent, and a foreign value must be reported, not overwritten by a later insert.
 */
export const GET = script(`${FOREIGN}
local out = {}
for i = 1, #KEYS do
  local value = redis.pcall('GET', KEYS[i])
  if not value then out[i] = 0
  elseif type(value) == 'table' then out[i] = value
  elseif string.sub(value, 1, 3) ~= 'o1|' then out[i] = foreign(KEYS[i])
  else out[i] = value end
end
return out
`);
