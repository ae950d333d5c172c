import { InvalidArgumentError } from '../core/errors.js';
import { absoluteRecord, type RecordId, type RecordState, type Settlement, type StoredRecord } from '../core/record.js';
import type { Expectation, InsertResult, RecordPatch } from '../store.js';
import { FIELDS, INDEXED_STATES, LEASE_MARGIN_MS, SETTLED_TAG, TAG } from './scripts.js';

// Hot path: every function here runs once per call; each record and patch becomes one string in
// the layout of scripts.ts (FIELDS), written and read field by field in that order.

/**
 * The key of a record: `<prefix>r:<len(tenant)>:<tenant>:<len(action)>:<action>:<key>`. The
 * lengths (in UTF-16 units) make the split unambiguous although every part may contain ':'.
 */
export function recordKey(prefix: string, id: RecordId): string {
  return `${prefix}r:${id.tenant.length}:${id.tenant}:${id.action.length}:${id.action}:${id.key}`;
}

/** The index keys every writing script takes first, in the order of INDEXED_STATES: `<prefix>i:<state>`. */
export function indexKeys(prefix: string): string[] {
  return INDEXED_STATES.map((state) => `${prefix}i:${state}`);
}

/** Whether a stored string is a record of ours (either tag). */
export function isRecordText(s: string): boolean {
  return s.startsWith(TAG) || s.startsWith(SETTLED_TAG);
}

/**
 * A settlement as its field: JSON with every '|' escaped (JSON reads '\u007c' back as '|'), so
 * the field never holds the separator, whatever a settler's name or note says.
 */
function settlementText(settlement: Settlement): string {
  return JSON.stringify(settlement).replace(/\|/g, '\\u007c');
}

/** In a patch: keep the stored field. No number, state or JSON text is ever '~'. */
const KEEP = '~';

// A null goes out as '': no number or JSON text is ever empty. (A result of '' would read back as null.)
const opt = (value: number | string | null | undefined): string =>
  value === null || value === undefined ? '' : String(value);

/**
 * A text field in the middle of the layout: it may not hold the separator, nor be the keep mark.
 * The engine's fingerprints (hex) and trace ids (UUIDs) never do; this guards other callers.
 */
function text(value: unknown, name: string): string {
  const s = String(value);
  if (s.includes('|') || s === KEEP)
    throw new InvalidArgumentError(`redis store: ${name} may not contain '|' or be '~'`);
  return s;
}

/** The stored string of a record (SETTLED_TAG's form when it carries a settlement). Its id is not in it: the key holds that. */
export function encodeRecord(r: StoredRecord): string {
  if (r.result === KEEP) throw new InvalidArgumentError("redis store: a result may not be '~'");
  const head = `${String(r.state)}|${Number(r.fence)}|${opt(r.leaseUntil)}|${opt(r.expiresAt)}|${Number(r.attempts)}|${Number(r.createdAt)}|${Number(r.updatedAt)}|${opt(r.completedAt)}|${text(r.fingerprint, 'fingerprint')}|${text(r.traceId, 'traceId')}`;
  if (r.settlement) return `${SETTLED_TAG}${head}|${settlementText(r.settlement)}|${opt(r.result)}`;
  return `${TAG}${head}|${opt(r.result)}`;
}

/**
 * When Redis should drop a record (its PXAT), by the expiry rule of scripts.ts: '' for never
 * (unknown, or no expiresAt), else expiresAt, or for an in_progress record its lease plus
 * LEASE_MARGIN_MS when that is later. The times are all absolute or all ms from one now, and
 * the answer is of the same kind.
 */
export function expiryOf(r: StoredRecord): string {
  if (r.state === 'unknown' || r.expiresAt === null || r.expiresAt === undefined) return '';
  const expires = Number(r.expiresAt);
  if (r.state === 'in_progress' && r.leaseUntil !== null && r.leaseUntil !== undefined) {
    const keep = Number(r.leaseUntil) + LEASE_MARGIN_MS;
    if (keep > expires) return String(keep);
  }
  return String(expires);
}

/**
 * A record whose times are ms from Redis's now as INSERT reads it (its INSERT_SLOTS strings): its
 * shape (the fields but the texts, and its expiry), then its texts ('#' first when they hold a settlement).
 */
export function relativeRecordArgs(r: StoredRecord): [string, string] {
  if (r.result === KEEP) throw new InvalidArgumentError("redis store: a result may not be '~'");
  return [
    `${text(r.state, 'state')}|${Number(r.fence)}|${opt(r.leaseUntil)}|${opt(r.expiresAt)}|${Number(r.attempts)}|${Number(r.createdAt)}|${Number(r.updatedAt)}|${opt(r.completedAt)}|${expiryOf(r)}`,
    r.settlement
      ? `#|${text(r.fingerprint, 'fingerprint')}|${text(r.traceId, 'traceId')}|${settlementText(r.settlement)}|${opt(r.result)}`
      : `|${text(r.fingerprint, 'fingerprint')}|${text(r.traceId, 'traceId')}|${opt(r.result)}`,
  ];
}

// A patch field as the UPDATE script reads it: KEEP when the patch leaves it alone.
const patched = (value: number | string | null | undefined): string => (value === undefined ? KEEP : opt(value));

/**
 * A conditional write as UPDATE reads it (its UPDATE_SLOTS strings): the expected fence and
 * lease, the shape (checks, the patch's state and times), the patch's other fields, its result;
 * KEEP for every field the patch leaves alone.
 */
export function updateArgs(expect: Expectation, p: RecordPatch, relative: boolean): string[] {
  if (p.result === KEEP) throw new InvalidArgumentError("redis store: a result may not be '~'");
  let check = '0';
  let lease = '';
  if ('leaseUntil' in expect) {
    check = expect.leaseUntil === null || expect.leaseUntil === undefined ? '1' : '2';
    lease = opt(expect.leaseUntil);
  }
  const state = p.state === undefined ? KEEP : text(p.state, 'state');
  const fingerprint = p.fingerprint === undefined ? KEEP : text(p.fingerprint, 'fingerprint');
  const traceId = p.traceId === undefined ? KEEP : text(p.traceId, 'traceId');
  const settlement = p.settlement === undefined ? KEEP : p.settlement === null ? '' : settlementText(p.settlement);
  return [
    String(Number(expect.fence)),
    lease,
    `${check}|${expect.states.join(',')}|${relative ? '1' : '0'}|${state}|${patched(p.leaseUntil)}|${patched(p.expiresAt)}|${patched(p.createdAt)}|${patched(p.updatedAt)}|${patched(p.completedAt)}`,
    `${patched(p.fence)}|${patched(p.attempts)}|${fingerprint}|${traceId}|${settlement}`,
    patched(p.result),
  ];
}

const num = (s: string): number | null => (s === '' ? null : Number(s));

/** A record from its stored string (which GET and INSERT checked to carry a tag) and its id. */
export function decodeRecord(value: unknown, id: RecordId): StoredRecord {
  // A client with a Buffer type mapping answers Buffers: String() reads those too.
  const s = String(value);
  // The fields in layout order (FIELDS), each up to the next '|'; the last one, the result, is
  // the rest. A plain loop rather than split(): the result may itself contain '|'.
  const f: string[] = [];
  let at = TAG.length;
  for (let i = 0; i < FIELDS.length - 1; i++) {
    const end = s.indexOf('|', at);
    f.push(s.slice(at, end));
    at = end + 1;
  }
  let settlement: string | undefined;
  if (s.startsWith(SETTLED_TAG)) {
    const end = s.indexOf('|', at);
    settlement = s.slice(at, end);
    at = end + 1;
  }
  const result = s.slice(at);
  const record: StoredRecord = {
    tenant: id.tenant,
    action: id.action,
    key: id.key,
    state: f[0] as RecordState,
    fingerprint: f[8] as string,
    fence: Number(f[1]),
    attempts: Number(f[4]),
    leaseUntil: num(f[2] as string),
    result: result === '' ? null : result,
    traceId: f[9] as string,
    createdAt: Number(f[5]),
    updatedAt: Number(f[6]),
    completedAt: num(f[7] as string),
    expiresAt: num(f[3] as string),
  };
  // Absent, not undefined, on a record never settled (as the other stores read it).
  if (settlement) record.settlement = JSON.parse(settlement) as Settlement;
  return record;
}

/** The per-record answers of a batch script, checked to be one per record (and `extra` more). */
export function answers(reply: unknown, count: number, extra = 0): unknown[] {
  if (!Array.isArray(reply) || reply.length !== count + extra)
    throw new Error(`redis script answered ${Array.isArray(reply) ? reply.length : typeof reply} for ${count} keys`);
  return reply;
}

/**
 * One record's answer to INSERT or INSERT_GIVEN: an error of that record, the existing record
 * (a string with the tag), or a number when inserted: INSERT's is the fence stored (a new claim's starts at
 * Redis's clock, and its times are the given durations from `now`, Redis's clock in ms). Built
 * from the record given rather than read back, as the other stores answer an insert.
 */
export function insertAnswer(
  answer: unknown,
  record: StoredRecord,
  relative: boolean,
  now: number,
): InsertResult | Error {
  if (answer instanceof Error) return answer;
  // Told apart by the tag (which the script checked) rather than the reply's type, so a client
  // that maps integers to strings reads them too.
  if (typeof answer !== 'number' && isRecordText(String(answer)))
    return { inserted: false, record: decodeRecord(answer, record), now };
  if (!relative) return { inserted: true, record, now };
  const stored = absoluteRecord(record, now);
  stored.fence = Number(answer);
  // absoluteRecord copies the fields every claim has; a settlement (never on the engine's claims) is carried here.
  if (record.settlement) stored.settlement = record.settlement;
  return { inserted: true, record: stored, now };
}

/** One record's answer to UPDATE: Redis's now (ms) when it applied, null when it did not, or an error of that record. */
export function updateAnswer(answer: unknown): number | null | Error {
  if (answer instanceof Error) return answer;
  const now = Number(answer);
  return now === 0 ? null : now;
}

/** One record's answer to GET: the record, null, or an error of that record. */
export function getAnswer(answer: unknown, id: RecordId): StoredRecord | null | Error {
  if (answer instanceof Error) return answer;
  return answer === 0 ? null : decodeRecord(answer, id);
}
