import { INDEXED_STATES, script } from './scripts.js';

// The listing scripts read records by keys they find (index members, SCAN) rather than keys in
// KEYS: a single Redis allows that, and the store is for a single Redis (see store.ts). Both
// learn the store's prefix, as Redis sees it (a client's own key prefix included), from KEYS[1],
// an index key `<prefix>i:<state>`, and read a record at `<prefix>r:<member>`.
//
// Both take the same filters first:
// ARGV 1. the state ('' any); 2. the tenant as '=' .. tenant ('' any); 3. the action, the same;
//      4. updatedBefore in epoch ms ('' none); 5. the most records to answer.
// and go on from a cursor given on a node (ARGV 6 and 8), answering their own node last.
//
// A member (the key past `<prefix>r:`) is `<len>:<tenant>:<len>:<action>:<key>` with the lengths
// in UTF-16 units (recordKey in codec.ts), which `split` walks in UTF-8 bytes: one unit per
// character, two for one of four bytes (outside the BMP).
const PREFIX = `
local prefix = string.match(KEYS[1], '^(.*)i:[%a_]+$')
local skip = #prefix + 3
-- SCAN MATCH takes a glob: the prefix's own glob characters are escaped to match themselves.
local function glob(s) return (string.gsub(s, '[%*%?%[%]\\\\]', '\\\\%0')) end
`;

const FILTERS = `${PREFIX}
local want_state, want_tenant, want_action = ARGV[1], ARGV[2], ARGV[3]
local before = tonumber(ARGV[4])
local limit = tonumber(ARGV[5])
local function units(s, at, n)
  while n > 0 do
    local b = string.byte(s, at)
    if not b then return nil end
    if b < 128 then at = at + 1 elseif b < 224 then at = at + 2 elseif b < 240 then at = at + 3
    else at = at + 4; n = n - 1 end
    n = n - 1
  end
  return at
end
local function split(m)
  local tl, ts = string.match(m, '^(%d+):()')
  if not tl then return nil end
  local te = units(m, ts, tonumber(tl))
  if not te then return nil end
  local al, as = string.match(m, '^:(%d+):()', te)
  if not al then return nil end
  local ae = units(m, as, tonumber(al))
  if not ae or string.sub(m, ae, ae) ~= ':' then return nil end
  return string.sub(m, ts, te - 1), string.sub(m, as, ae - 1)
end
-- A record's state and updatedAt, or nil for a value that is not a record of ours (gone,
-- another type, a foreign string): listing passes over those rather than failing.
local function read(value)
  if type(value) ~= 'string' then return nil end
  return string.match(value, '^o[12]|([^|]*)|[^|]*|[^|]*|[^|]*|[^|]*|[^|]*|([^|]*)|')
end
-- Whether a member's tenant and action fit the filters (read from the key alone).
local function named(m)
  if want_tenant == '' and want_action == '' then return true end
  local tenant, action = split(m)
  if not tenant then return false end
  if want_tenant ~= '' and '=' .. tenant ~= want_tenant then return false end
  if want_action ~= '' and '=' .. action ~= want_action then return false end
  return true
end
-- Whether a record of ours fits the filters but its state.
local function fits(m, updated)
  if before and tonumber(updated) > before then return false end
  return named(m)
end
-- A SCAN or SSCAN cursor is a place in one process's hash table, laid out by a hash seed each
-- process draws at start: on another node (a replica a failover promoted, a restarted Redis) it
-- is no place at all, and going on from it would skip keys and repeat others. So a cursor comes
-- with the first digits of the run id of the node that gave it (ARGV[8], '' unknown), and a scan
-- under way that was given on another node starts over: records may come again, none is skipped.
-- A node that refuses INFO (an ACL) answers '' and is never checked.
local info = redis.pcall('INFO', 'server')
local node = type(info) == 'string' and string.match(info, 'run_id:(%x%x%x%x%x%x%x%x)') or ''
local function resume(cursor)
  if cursor ~= '' and node ~= '' and ARGV[8] ~= '' and ARGV[8] ~= node then return '0' end
  return cursor
end
`;

/**
 * About the most index members one LIST_INDEX run visits (the sum of its SSCAN COUNTs), so a run
 * whose filters few members meet stays short (some ms) even on a large index; a page then ends
 * short, with a cursor.
 */
export const INDEX_BUDGET = 10_000;
/** About the most keys the SCAN calls of one LIST_SCAN run visit (the sum of their COUNTs). */
export const SCAN_BUDGET = 100_000;
/** The largest COUNT of one SCAN or SSCAN call: what a page holds beyond its limit (pending) stays below it. */
export const SCAN_COUNT_MAX = 1_000;

/**
 * One page of a state's index by SSCAN (MATCH on the tenant's and action's part of the key when
 * given), up to `limit` records that fit the filters. A set has no order, so a page is in no
 * order either; SSCAN answers every member that stays in the set for the whole listing. A member
 * whose record is gone (expired by its PXAT, which cannot touch the index), is no record of ours,
 * or is in another state is removed from the index as it is met, in the same run as the read that
 * found it stale, so a record written meanwhile is never dropped. Members an SSCAN call answers
 * beyond the page's room are answered as pending, unread, for the next page to read first.
 * Each call's COUNT is the records still missing (10 to SCAN_COUNT_MAX); a run stops after about
 * INDEX_BUDGET members visited, and a page then ends short.
 *
 * KEYS: the index key of the state.
 * ARGV: the filters (1 to 5, the state that of the index); 6. the SSCAN cursor ('0' to start, ''
 *   when the scan is done); 7. the start of the member every record must have ('' any); 8. the
 *   node of the cursor; 9 on. pending members.
 * Answers: the SSCAN cursor ('' when done), the pending members, the records as member, value,
 *   member, value... (members are record keys past `<prefix>r:`), and the node.
 */
export const LIST_INDEX = script(`${FILTERS}
local key = KEYS[1]
local out, pending, n = {}, {}, 0
local function take(k)
  if n == limit then pending[#pending + 1] = string.sub(k, skip); return end
  local value = redis.pcall('GET', k)
  local state, updated = read(value)
  if state ~= want_state then redis.call('SREM', key, k); return end
  local m = string.sub(k, skip)
  if fits(m, updated) then
    out[#out + 1] = m
    out[#out + 1] = value
    n = n + 1
  end
end
for i = 9, #ARGV do take(prefix .. 'r:' .. ARGV[i]) end
local pattern = glob(prefix .. 'r:' .. ARGV[7]) .. '*'
local cursor, visited = resume(ARGV[6]), 0
while cursor ~= '' and n < limit and visited < ${INDEX_BUDGET} do
  local count = math.min(math.max(limit - n, 10), ${SCAN_COUNT_MAX})
  local found = redis.call('SSCAN', key, cursor, 'MATCH', pattern, 'COUNT', count)
  visited = visited + count
  cursor = found[1]
  if cursor == '0' then cursor = '' end
  for _, k in ipairs(found[2]) do take(k) end
end
return { cursor, pending, out, node }
`);

/**
 * One page of every record under the prefix, by SCAN MATCH (of the tenant's and action's part of
 * the key when given), filtered here. A SCAN call may answer more keys than the page has room
 * for; those that fit are answered as pending, for the next page to read first, so none is
 * skipped. Each call's COUNT is about the keys that should hold the records still missing, by
 * the share of keys that fitted so far (10 to SCAN_COUNT_MAX), and a run stops after about
 * SCAN_BUDGET keys: a page may end short, even empty, before the scan does.
 *
 * KEYS: an index key (only to learn the prefix; no index is read).
 * ARGV: the filters (1 to 5); 6. the SCAN cursor ('0' to start, '' when the scan is done);
 *   7. the start of the member every record must have ('' any); 8. the node of the cursor; 9 on.
 *   pending members.
 * Answers: the SCAN cursor ('' when done), the pending members, the records as member, value,
 *   member, value..., and the node.
 */
export const LIST_SCAN = script(`${FILTERS}
local out, pending, n, fitted = {}, {}, 0, 0
-- Without a state filter the key's own tenant and action are checked first, so a key of another
-- tenant or action costs no GET; with one, the state (one GET and a match) first, which rules out
-- more keys than the tenant and action cost to read.
local early = want_state == ''
local function take(m, k)
  if early and not named(m) then return end
  local value = redis.pcall('GET', k)
  local state, updated = read(value)
  if not state or (not early and state ~= want_state) then return end
  if early then
    if before and tonumber(updated) > before then return end
  elseif not fits(m, updated) then return end
  fitted = fitted + 1
  if n == limit then pending[#pending + 1] = m; return end
  out[#out + 1] = m
  out[#out + 1] = value
  n = n + 1
end
for i = 9, #ARGV do take(ARGV[i], prefix .. 'r:' .. ARGV[i]) end
fitted = 0
local pattern = glob(prefix .. 'r:' .. ARGV[7]) .. '*'
local cursor, visited = resume(ARGV[6]), 0
while cursor ~= '' and n < limit and visited < ${SCAN_BUDGET} do
  local count = math.min(math.max(math.ceil((limit - n) * (visited + 1) / (fitted + 1)), 10), ${SCAN_COUNT_MAX})
  local found = redis.call('SCAN', cursor, 'MATCH', pattern, 'COUNT', count)
  visited = visited + count
  cursor = found[1]
  if cursor == '0' then cursor = '' end
  for _, k in ipairs(found[2]) do take(string.sub(k, skip), k) end
end
return { cursor, pending, out, node }
`);

/**
 * One SCAN step of rebuilding the indexes: every in_progress or unknown record among the keys of
 * one SCAN call joins its state's index (SADD, which keeps a member already there). For records
 * written before the indexes existed: an unknown record never expires, so without this it would
 * stay out of `list` until someone settled it. Safe beside live writes: a member added for a
 * record that moves on meanwhile is healed by the next listing.
 *
 * KEYS: the index keys (INDEXED_STATES).
 * ARGV: 1. the SCAN cursor ('0' to start); 2. its COUNT.
 * Answers: the next SCAN cursor ('0' when done) and how many members were added.
 */
export const REINDEX = script(`${PREFIX}
local index = { ${INDEXED_STATES.map((state, i) => `${state} = KEYS[${i + 1}]`).join(', ')} }
local found = redis.call('SCAN', ARGV[1], 'MATCH', glob(prefix .. 'r:') .. '*', 'COUNT', ARGV[2])
local added = 0
for _, k in ipairs(found[2]) do
  local value = redis.pcall('GET', k)
  if type(value) == 'string' then
    local to = index[string.match(value, '^o[12]|([^|]*)|')]
    if to then added = added + redis.call('SADD', to, k) end
  end
end
return { found[1], added }
`);
