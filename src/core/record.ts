/**
 * The life of one key. `in_progress` holds a lease and a fencing token; `succeeded` and `failed`
 * answer replays until they expire; `released` is a key whose last attempt failed transiently and
 * may be claimed again; `unknown` is a claim whose holder vanished under the 'hold' policy.
 */
export type RecordState = 'in_progress' | 'succeeded' | 'failed' | 'released' | 'unknown';

/** Identifies a record: a key is unique within its tenant and action. */
export interface RecordId {
  tenant: string;
  action: string;
  key: string;
}

/** A record as stores keep it. Times are epoch milliseconds; `expiresAt` null means permanent. */
export interface StoredRecord extends RecordId {
  state: RecordState;
  /** SHA-256 of the canonical input of the claim. */
  fingerprint: string;
  /** Fencing token: grows with every new holder, so a late holder's writes are refused. */
  fence: number;
  /** Executions started for this key, across takeovers and released failures. */
  attempts: number;
  /** While in_progress: when the claim lapses unless renewed. */
  leaseUntil: number | null;
  /** JSON text of the stored outcome (see engine/outcome.ts), null until finished. */
  result: string | null;
  /** One per business intent, kept across retries. */
  traceId: string;
  createdAt: number;
  updatedAt: number;
  completedAt: number | null;
  expiresAt: number | null;
  /** How an `unknown` or stalled record was settled, by a person or a reconciler; absent when it never was. */
  settlement?: Settlement;
}

/**
 * Who settled a record, when and with what answer: kept on the record, so an audit of a charge
 * shows whether it finished by itself or was decided afterwards, and by whom.
 */
export interface Settlement {
  /** 'reconciler' for the reconcile function of the action; else the person or token given (`resolve(..., { by })`). */
  by: string;
  /** Epoch ms, by the settler's clock. */
  at: number;
  /** The answer applied: a value stored, an error stored, or the key released for a retry. */
  answer: 'value' | 'error' | 'retry';
  /** Free text the settler gave (the downstream's reference, a ticket number). */
  note?: string;
}

/** The fields of a record a caller may see; the raw stored result stays inside. */
export type PublicRecord = Omit<StoredRecord, 'result'>;

/** Fields written to a record; a `settlement` of null is one removed. */
export type RecordChanges = Partial<Omit<StoredRecord, 'settlement'>> & { settlement?: Settlement | null };

const NO_CHANGES: RecordChanges = {};

// `changes` wins where it has a field (the id is never changed); a null in it is a value. Written out field by field: on
// Node 20 `{ ...record, ...changes }` takes a slow path, and this runs once per execution.
const pick = <T>(changed: T | undefined, stored: T): T => (changed !== undefined ? changed : stored);

/** Strips the stored result from a record, as it is after `changes` were written to it. */
export function publicRecord(record: StoredRecord, changes: RecordChanges = NO_CHANGES): PublicRecord {
  return {
    tenant: record.tenant,
    action: record.action,
    key: record.key,
    state: pick(changes.state, record.state),
    fingerprint: pick(changes.fingerprint, record.fingerprint),
    fence: pick(changes.fence, record.fence),
    attempts: pick(changes.attempts, record.attempts),
    leaseUntil: pick(changes.leaseUntil, record.leaseUntil),
    traceId: pick(changes.traceId, record.traceId),
    createdAt: pick(changes.createdAt, record.createdAt),
    updatedAt: pick(changes.updatedAt, record.updatedAt),
    completedAt: pick(changes.completedAt, record.completedAt),
    expiresAt: pick(changes.expiresAt, record.expiresAt),
    ...settlementOf(changes.settlement !== undefined ? changes.settlement : record.settlement),
  };
}

// Absent rather than undefined: a record that was never settled has no such field at all.
const NOT_SETTLED: { settlement?: Settlement } = {};
const settlementOf = (settlement: Settlement | null | undefined): { settlement?: Settlement } =>
  settlement ? { settlement } : NOT_SETTLED;

/**
 * A record's id as one line of text, `tenant/action/key`, each part percent-encoded (names and keys
 * may hold '/'): what the CLI and the admin API take and print. Parts of plain characters read as they are.
 */
export function recordRef(id: RecordId): string {
  return [id.tenant, id.action, id.key].map(encodeURIComponent).join('/');
}

/** Reads `recordRef`'s text back; null when it is not three non-empty, well-encoded parts. */
export function parseRecordRef(text: string): RecordId | null {
  const parts = text.split('/');
  if (parts.length !== 3) return null;
  try {
    const [tenant, action, key] = parts.map(decodeURIComponent) as [string, string, string];
    if (!tenant || !action || !key) return null;
    return { tenant, action, key };
  } catch {
    return null;
  }
}

/**
 * A patch whose times are relative (milliseconds from `now`, see the store's WriteOptions) with
 * absolute times. Field by field, undefined where the patch leaves a field alone (as
 * publicRecord reads it): no spread, which Node 20 makes slow, and this runs once per execution.
 */
export function absoluteTimes(patch: RecordChanges, now: number): RecordChanges {
  return {
    settlement: patch.settlement,
    state: patch.state,
    fingerprint: patch.fingerprint,
    fence: patch.fence,
    attempts: patch.attempts,
    result: patch.result,
    traceId: patch.traceId,
    leaseUntil: after(now, patch.leaseUntil),
    updatedAt: patch.updatedAt === undefined ? undefined : now + patch.updatedAt,
    completedAt: after(now, patch.completedAt),
    expiresAt: after(now, patch.expiresAt),
    createdAt: patch.createdAt === undefined ? undefined : now + patch.createdAt,
  };
}

/** A new record whose times are relative to `now` (see absoluteTimes), with absolute times. */
export function absoluteRecord(record: StoredRecord, now: number): StoredRecord {
  return {
    tenant: record.tenant,
    action: record.action,
    key: record.key,
    state: record.state,
    fingerprint: record.fingerprint,
    fence: record.fence,
    attempts: record.attempts,
    leaseUntil: after(now, record.leaseUntil),
    result: record.result,
    traceId: record.traceId,
    createdAt: now + record.createdAt,
    updatedAt: now + record.updatedAt,
    completedAt: after(now, record.completedAt),
    expiresAt: after(now, record.expiresAt),
  };
}

function after<T extends number | null | undefined>(now: number, ms: T): T {
  return (ms === null || ms === undefined ? ms : now + ms) as T;
}

/** What to do when an in_progress claim's lease ran out without a completion. */
export type LeaseExpiredPolicy = 'retry' | 'hold';

/** What a caller must do, given the record found for its key. */
export type Decision =
  | { kind: 'replay' }
  | { kind: 'key_reused' }
  | { kind: 'in_progress'; retryAfterMs: number }
  | { kind: 'unknown' }
  | { kind: 'mark_unknown' }
  | { kind: 'take_over' }
  | { kind: 'start_fresh' };

/** True when a finished or released record no longer answers for its key. */
export function isExpired(record: StoredRecord, now: number): boolean {
  if (record.state === 'in_progress' || record.state === 'unknown') return false;
  return record.expiresAt !== null && record.expiresAt <= now;
}

/**
 * The single rule of oncely: given the record stored for a key and a new request for it, what now.
 * Pure: the store's conditional writes make the chosen transition atomic.
 */
export function decide(record: StoredRecord, fingerprint: string, policy: LeaseExpiredPolicy, now: number): Decision {
  if (isExpired(record, now)) return { kind: 'start_fresh' };
  // A released key holds no outcome, so any input may claim it.
  if (record.state === 'released') return { kind: 'take_over' };
  if (record.fingerprint !== fingerprint) return { kind: 'key_reused' };
  switch (record.state) {
    case 'succeeded':
    case 'failed':
      return { kind: 'replay' };
    case 'unknown':
      return { kind: 'unknown' };
    case 'in_progress': {
      const remaining = (record.leaseUntil ?? 0) - now;
      if (remaining > 0) return { kind: 'in_progress', retryAfterMs: Math.min(Math.max(remaining, 10), 1_000) };
      return policy === 'hold' ? { kind: 'mark_unknown' } : { kind: 'take_over' };
    }
  }
}
