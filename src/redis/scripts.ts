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

// Shared by every script that writes, so Redis drops a record exactly when the engine would stop
// answering with it. An unknown record waits for a person and a null expiresAt means permanent:
// neither may vanish. An in_progress record must outlive its lease even when the TTL is shorter,
// or a live claim would disappear and a duplicate would run. Times are the caller's epoch ms; a
// time already past makes Redis delete the key at once, which is what an expired record means.
// The original strings are passed to PEXPIREAT so no Lua number formatting is involved.
const SET_EXPIRY = `
local function set_expiry(key)
  local v = redis.call('HMGET', key, 'state', 'expiresAt', 'leaseUntil')
  local state, expires, lease = v[1], v[2], v[3]
  if state == 'unknown' or not expires then
    redis.call('PERSIST', key)
    return
  end
  if state == 'in_progress' and lease and tonumber(lease) > tonumber(expires) then
    expires = lease
  end
  redis.call('PEXPIREAT', key, expires)
end
`;

/**
 * Insert if absent. KEYS[1] the record key; ARGV field/value pairs of the new record (null fields
 * left out). Returns {1} when inserted, else {0, HGETALL of the existing record}.
 */
export const INSERT_OR_GET = script(`${SET_EXPIRY}
local existing = redis.call('HGETALL', KEYS[1])
if #existing > 0 then
  return {0, existing}
end
redis.call('HSET', KEYS[1], unpack(ARGV))
set_expiry(KEYS[1])
return {1}
`);

/**
 * Conditional write. KEYS[1] the record key. ARGV:
 *   1 expected fence;
 *   2 lease check: '0' none, '1' lease must be absent (null), '2' lease must equal ARGV[3];
 *   3 expected lease (when ARGV[2] is '2');
 *   4 allowed states, each wrapped in commas: ',in_progress,released,';
 *   5 n, the count of field/value items that follow; 6..5+n the pairs to set;
 *   the rest are fields to delete (patch values that are null).
 * Returns 1 when the write applied, 0 when the record is missing or did not match.
 */
export const UPDATE = script(`${SET_EXPIRY}
local v = redis.call('HMGET', KEYS[1], 'state', 'fence', 'leaseUntil')
local state, fence, lease = v[1], v[2], v[3]
if not state then return 0 end
if tonumber(fence) ~= tonumber(ARGV[1]) then return 0 end
if not string.find(ARGV[4], ',' .. state .. ',', 1, true) then return 0 end
if ARGV[2] == '1' and lease then return 0 end
if ARGV[2] == '2' and (not lease or tonumber(lease) ~= tonumber(ARGV[3])) then return 0 end
local n = tonumber(ARGV[5])
if n > 0 then
  redis.call('HSET', KEYS[1], unpack(ARGV, 6, 5 + n))
end
if #ARGV > 5 + n then
  redis.call('HDEL', KEYS[1], unpack(ARGV, 6 + n, #ARGV))
end
set_expiry(KEYS[1])
return 1
`);

/**
 * Read one record. KEYS[1] the record key. Returns the HGETALL pairs (empty when absent).
 * A script rather than a bare HGETALL because a Lua table always comes back as a flat array,
 * while HGETALL itself answers a map on RESP3 connections (node-redis 6 defaults to RESP3) and
 * an array on RESP2: one shape whatever client the caller passes.
 */
export const GET = script(`
return redis.call('HGETALL', KEYS[1])
`);
