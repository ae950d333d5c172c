import type { RecordId, RecordState, StoredRecord } from '../core/record.js';
import type { Expectation, InsertResult, RecordPatch } from '../store.js';

// Hot path: every function here runs once per record of a batch, so none builds intermediate
// objects or closures, and arguments are appended to one flat array (the EVALSHA command).

/** One conditional write waiting for its batch. */
export interface UpdateItem {
  /** The record to write. */
  id: RecordId;
  /** What the record must still be. */
  expect: Expectation;
  /** The fields to change. */
  patch: RecordPatch;
}

/**
 * The hash key of a record: `<prefix>r:<len(tenant)>:<tenant>:<len(action)>:<action>:<key>`. The
 * lengths (in UTF-16 units) make the split unambiguous although every part may contain ':'.
 */
export function recordKey(prefix: string, id: RecordId): string {
  return `${prefix}r:${id.tenant.length}:${id.tenant}:${id.action.length}:${id.action}:${id.key}`;
}

// A null goes out as '': no number or JSON text is ever empty. (A result of '' would read back as null.)
const opt = (value: number | string | null | undefined): string =>
  value === null || value === undefined ? '' : String(value);

/**
 * Appends a record's values in FIELDS order (see scripts.ts), as INSERT reads them. Everything
 * goes through String(): a stray non-string would make the driver throw while writing the whole
 * batch, failing every caller in it.
 */
export function pushRecord(args: string[], r: StoredRecord): void {
  args.push(
    String(r.tenant),
    String(r.action),
    String(r.key),
    String(r.state),
    String(r.fingerprint),
    String(r.fence),
    String(r.attempts),
    opt(r.leaseUntil),
    opt(r.result),
    String(r.traceId),
    String(r.createdAt),
    String(r.updatedAt),
    opt(r.completedAt),
    opt(r.expiresAt),
  );
}

// The id is the key itself: a patch never moves a record.
const isIdField = (field: string): boolean => field === 'tenant' || field === 'action' || field === 'key';

/** Appends one conditional write in UPDATE's layout (see scripts.ts). */
export function pushUpdate(args: string[], expect: Expectation, patch: RecordPatch): void {
  let check = '0';
  let lease = '';
  if ('leaseUntil' in expect) {
    check = expect.leaseUntil === null || expect.leaseUntil === undefined ? '1' : '2';
    lease = opt(expect.leaseUntil);
  }
  const counts = args.length + 4;
  args.push(String(expect.fence), check, lease, `,${expect.states.join(',')},`, '0', '0');
  const fields = patch as Record<string, unknown>;
  let sets = 0;
  for (const field in fields) {
    const value = fields[field];
    if (value === undefined || value === null || isIdField(field)) continue;
    args.push(field, String(value));
    sets += 2;
  }
  let dels = 0;
  for (const field in fields) {
    if (fields[field] !== null || isIdField(field)) continue;
    args.push(field);
    dels++;
  }
  args[counts] = String(sets);
  args[counts + 1] = String(dels);
}

// A client with a Buffer type mapping answers Buffers: String() and Number() read those too.
const num = (value: unknown): number | null => (value === null || value === undefined ? null : Number(value));

/** A record from its fields in FIELDS order, as INSERT and GET answer them. */
export function toRecord(v: unknown[]): StoredRecord {
  return {
    tenant: String(v[0]),
    action: String(v[1]),
    key: String(v[2]),
    state: String(v[3]) as RecordState,
    fingerprint: String(v[4]),
    fence: Number(v[5]),
    attempts: Number(v[6]),
    leaseUntil: num(v[7]),
    result: v[8] === null || v[8] === undefined ? null : String(v[8]),
    traceId: String(v[9]),
    createdAt: Number(v[10]),
    updatedAt: Number(v[11]),
    completedAt: num(v[12]),
    expiresAt: num(v[13]),
  };
}

/** The per-record answers of a batch script, checked to be one per record. */
export function answers(reply: unknown, count: number): unknown[] {
  if (!Array.isArray(reply) || reply.length !== count)
    throw new Error(`redis script answered ${Array.isArray(reply) ? reply.length : typeof reply} for ${count} keys`);
  return reply;
}

/** One record's answer to INSERT: an error of that record, the existing record, or its own. */
export function insertAnswer(answer: unknown, record: StoredRecord): InsertResult | Error {
  if (answer instanceof Error) return answer;
  if (Array.isArray(answer)) return { inserted: false, record: toRecord(answer) };
  // A copy, so the caller's object and the stored one never alias.
  if (Number(answer) === 1) return { inserted: true, record: { ...record } };
  return new Error(`unexpected insert answer from redis: ${String(answer)}`);
}

/** One record's answer to UPDATE: whether it applied, or an error of that record. */
export function updateAnswer(answer: unknown): boolean | Error {
  return answer instanceof Error ? answer : Number(answer) === 1;
}

/** One record's answer to GET: the record, null, or an error of that record. */
export function getAnswer(answer: unknown): StoredRecord | null | Error {
  if (answer instanceof Error) return answer;
  return Array.isArray(answer) ? toRecord(answer) : null;
}
