import type { RecordId, RecordState, StoredRecord } from './core/record.js';

/** The condition a conditional write checks: the record must still be as the writer last saw it. */
export interface Expectation {
  /** The fencing token the writer holds or observed. */
  fence: number;
  /** States the record may be in for the write to apply. */
  states: readonly RecordState[];
  /** When given, the lease must be exactly this (guards a takeover against a concurrent renewal). */
  leaseUntil?: number | null;
}

/** Fields a conditional write may change. */
export type RecordPatch = Partial<Omit<StoredRecord, 'tenant' | 'action' | 'key'>>;

/** Outcome of an insert-if-absent. */
export interface InsertResult {
  /** True when this call created the record (the caller holds the claim). */
  inserted: boolean;
  /** The record now stored: the new one, or the one that was there. */
  record: StoredRecord;
}

/**
 * Where records live. Every method is atomic on its own; the engine composes them. `tx` is a
 * caller's open transaction (a better-sqlite3 Database after BEGIN, a pg client after BEGIN) for
 * stores that can join one. Errors that are not OncelyErrors are reported as STORE_UNAVAILABLE.
 */
export interface RecordStore {
  /** Short name for logs and metrics: 'sqlite', 'postgres', 'redis'. */
  readonly kind: string;
  /** Creates the record unless one exists for its id; returns which one is stored. */
  insertOrGet(record: StoredRecord, tx?: unknown): Promise<InsertResult>;
  /** Applies `patch` only if the record matches `expect`; true when it did. */
  update(id: RecordId, expect: Expectation, patch: RecordPatch, tx?: unknown): Promise<boolean>;
  /** Reads one record, or null. */
  get(id: RecordId, tx?: unknown): Promise<StoredRecord | null>;
  /** Deletes up to `limit` records that expired at or before `now` (never unknown or live ones); returns how many. */
  purgeExpired(now: number, limit: number): Promise<number>;
  /** Releases connections the store opened itself (never a pool or client the caller passed in). */
  close(): Promise<void>;
}
