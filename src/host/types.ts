import type { ErrorCode } from '../core/errors.js';
import type { Sql } from '../db/types.js';
import type { Operator } from './operators.js';

/** Answer of every store primitive: never thrown for expected outcomes. */
export type Result<T> = { ok: true; data: T } | { ok: false; error: { code: ErrorCode; message: string } };

/**
 * A column's condition in a `where`: an operator built by `op` (`op.ne(x)`, `op.in([...])`), or a
 * plain value, which means equality. A plain object or array is a value too, never an operator.
 */
export type Condition = Operator | unknown;

/** Columns (camelCase) to conditions, all of which must hold. */
export type Where = Record<string, Condition>;

/** The data primitives handlers and consumers get as `ctx.store`, bound to the current transaction. */
export interface DataStore {
  /** Inserts unless a row with the same `uniqueBy` values exists; `created: false` returns the existing row. */
  createIfAbsent(
    table: string,
    record: Record<string, unknown>,
    uniqueBy: readonly string[],
  ): Promise<Result<{ record: Record<string, unknown>; created: boolean }>>;
  /**
   * Updates the rows matching `where`; `affected === 1` means this caller won the transition. A
   * patch value `op.increment(n)` adds to the stored number in the statement itself.
   */
  update(table: string, where: Where, patch: Record<string, unknown>): Promise<Result<{ affected: number }>>;
  /**
   * Applies `patch` to the row identified by `keyFields` only if `version` is newer than the stored
   * one (column `version`); creates the row if absent.
   */
  applyVersion(
    table: string,
    keyFields: Record<string, unknown>,
    version: number,
    patch: Record<string, unknown>,
  ): Promise<Result<{ applied: true } | { applied: false; reason: 'stale' }>>;
  /** One row matching `where`, or null. */
  get(table: string, where: Where): Promise<Result<Record<string, unknown> | null>>;
  /** Rows matching `where`, ordered and limited. */
  find(
    table: string,
    where?: Where,
    options?: { orderBy?: string | readonly [string, 'asc' | 'desc'][]; limit?: number },
  ): Promise<Result<Record<string, unknown>[]>>;
}

/** Creates the DataStore of one transaction. */
export type DataStoreFactory = (tx: Sql) => DataStore;

/** An event as consumers receive it. */
export interface HostEvent {
  /** The event id given by the sender (or the outbox id): the consumer's idempotency key. */
  id: string;
  source: string;
  type: string;
  data: unknown;
  receivedAt: number;
  /** 1 on the first delivery to the consumer, growing with each retry. */
  attempt: number;
  /** The intent's trace id, when the sender's headers or the enqueuing handler gave one; its consumer runs under it. */
  traceId?: string;
}

/**
 * What happened to an event, as counted by the host. `conflict`: a duplicate id whose body differs
 * from the stored one (the stored event is kept, the new body dropped); `replayed_from_dead_letter`:
 * a dead letter put back in the queue; `deferred`: an event put (back) to `waiting`, its consumer's
 * prerequisite not met yet.
 */
export type EventOutcome =
  | 'accepted'
  | 'duplicate'
  | 'conflict'
  | 'applied'
  | 'stale'
  | 'retrying'
  | 'dead_lettered'
  | 'replayed_from_dead_letter'
  | 'deferred';
