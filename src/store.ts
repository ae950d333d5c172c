import type { RecordId, RecordState, Settlement, StoredRecord } from './core/record.js';

/** The condition a conditional write checks: the record must still be as the writer last saw it. */
export interface Expectation {
  /** The fencing token the writer holds or observed. */
  fence: number;
  /** States the record may be in for the write to apply. */
  states: readonly RecordState[];
  /** When given, the lease must be exactly this (guards a takeover against a concurrent renewal). */
  leaseUntil?: number | null;
}

/** Fields a conditional write may change; a `settlement` of null removes the record's settlement. */
export type RecordPatch = Partial<Omit<StoredRecord, 'tenant' | 'action' | 'key' | 'settlement'>> & {
  settlement?: Settlement | null;
};

/** Outcome of an insert-if-absent. */
export interface InsertResult {
  /** True when this call created the record (the caller holds the claim). */
  inserted: boolean;
  /** The record now stored: the new one (with the times and fence the store gave it), or the one that was there. */
  record: StoredRecord;
  /** The store's clock when it answered, epoch ms: what `record`'s lease and expiry are to be compared with. */
  now: number;
}

/**
 * How a write reads the time fields it sets (createdAt on insert, updatedAt, completedAt,
 * leaseUntil, expiresAt). The engine writes them `relative`: milliseconds from the store's own
 * clock at the moment it applies the write (leaseUntil: the lease, expiresAt: the TTL, 0: now; a
 * null stays null). So every process measures leases and expiries by one clock, however far its
 * own is off; `update` answers with that moment, so the writer knows the stored times exactly.
 * Without it they are absolute epoch ms, as given.
 */
export interface WriteOptions {
  relative?: boolean;
}

/** Which records `list` answers; every field given must hold. */
export interface RecordQuery {
  state?: RecordState;
  tenant?: string;
  action?: string;
  /** Only records last written (`updatedAt`) at or before this epoch ms. */
  updatedBefore?: number;
  /** Most records in one page, 1 to 1,000. */
  limit: number;
  /** Where the previous page ended (its `cursor`); absent for the first page. */
  cursor?: string;
}

/** One page of `list`: records in the store's order, and the cursor of the next page (null after the last). */
export interface RecordPage {
  records: StoredRecord[];
  cursor: string | null;
}

/**
 * Where records live. Every method is atomic on its own; the engine composes them. `tx` is a
 * caller's open transaction (a better-sqlite3 Database after BEGIN, a pg client after BEGIN) for
 * stores that can join one. Errors that are not OncelyErrors are reported as STORE_UNAVAILABLE.
 */
export interface RecordStore {
  /** Short name for logs and metrics: 'sqlite', 'postgres', 'redis'. */
  readonly kind: string;
  /**
   * Creates the record unless one exists for its id; returns which one is stored. A store may
   * start a new record's fence above 1 (Redis does, so fences never go back when a record expired).
   */
  insertOrGet(record: StoredRecord, tx?: unknown, options?: WriteOptions): Promise<InsertResult>;
  /** Applies `patch` if the record matches `expect`: the store's clock (epoch ms) it applied at, else null. */
  update(
    id: RecordId,
    expect: Expectation,
    patch: RecordPatch,
    tx?: unknown,
    options?: WriteOptions,
  ): Promise<number | null>;
  /** Reads one record, or null. */
  get(id: RecordId, tx?: unknown): Promise<StoredRecord | null>;
  /**
   * One page of the records matching `query`, in an order stable across pages (a record written
   * between pages may be seen twice or not at all; none is skipped that stayed put). A cursor this
   * store did not give is CURSOR_INVALID. Listing `unknown` or `in_progress` records never reads
   * the whole store (SQL: an index on state; Redis: a set per state).
   */
  list(query: RecordQuery): Promise<RecordPage>;
  /** Deletes up to `limit` records that expired at or before `now` (never unknown or live ones); returns how many. */
  purgeExpired(now: number, limit: number): Promise<number>;
  /** Releases connections the store opened itself (never a pool or client the caller passed in). */
  close(): Promise<void>;
}
