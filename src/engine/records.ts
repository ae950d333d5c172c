/**
 * What operators do with records beside running them: list them by state, tenant, action and age,
 * and settle an unknown or stalled one (a person's `resolve`, a reconciler's answer). The checks
 * and patches live here; `Oncely` applies them to its store.
 */
import { type Duration, toMs } from '../core/duration.js';
import { InvalidArgumentError, OncelyError } from '../core/errors.js';
import { validateName } from '../core/key.js';
import { type PublicRecord, publicRecord, type RecordState, type StoredRecord } from '../core/record.js';
import type { RecordPatch, RecordQuery } from '../store.js';
import type { ActionOptions } from './options.js';
import { encodeError, encodeValue } from './outcome.js';
import { checkSettler } from './reconcile.js';

/** How a person or reconciler settles an `unknown` record. */
export type Resolution = { value: unknown } | { error: { name?: string; message: string; code?: string } } | 'retry';

/** Options of `resolve`: the record's tenant, the TTL of what is stored, and who settles it. */
export interface ResolveOptions {
  tenant?: string;
  ttl?: ActionOptions['ttl'];
  /** Who settles it, kept on the record (`settlement.by`). Default 'person'. */
  by?: string;
  /** Free text kept with the settlement: the downstream's reference, a ticket number. */
  note?: string;
  /**
   * A caller's open transaction to read and write the record in: on the host's SQLite connection,
   * which its record store shares, a write outside the Db's transactions could land in a handler's.
   */
  tx?: unknown;
}

/** Filters of `list`; all given must hold. With no tenant, every tenant's records are listed. */
export interface ListOptions {
  state?: RecordState;
  action?: string;
  tenant?: string;
  /** Only records last written at least this long ago ('10m'). */
  olderThan?: Duration;
  /** Most records per page, 1 to 1,000. Default 100. */
  limit?: number;
  /** The `cursor` of the previous page. */
  cursor?: string;
}

/** One page of `list`; pass `cursor` back for the next, null after the last. */
export interface RecordList {
  records: PublicRecord[];
  cursor: string | null;
}

const LIST_LIMIT_DEFAULT = 100;
const LIST_LIMIT_MAX = 1_000;
const STATES: readonly RecordState[] = ['in_progress', 'succeeded', 'failed', 'released', 'unknown'];
const NOTE_MAX = 1_000;

/** The store query of `list`'s filters, each checked: INVALID_ARGUMENT, or CURSOR_INVALID for an empty cursor. */
export function listQuery(options: ListOptions, now: number): RecordQuery {
  const { state, action, tenant, olderThan, cursor } = options;
  const limit = options.limit ?? LIST_LIMIT_DEFAULT;
  if (!Number.isInteger(limit) || limit < 1 || limit > LIST_LIMIT_MAX)
    throw new InvalidArgumentError(`limit must be a whole number from 1 to ${LIST_LIMIT_MAX}`);
  if (state !== undefined && !STATES.includes(state))
    throw new InvalidArgumentError(`state must be one of ${STATES.join(', ')}`);
  if (cursor !== undefined && (typeof cursor !== 'string' || cursor === ''))
    throw new OncelyError('CURSOR_INVALID', 'cursor must be the cursor of a previous page');
  return {
    limit,
    ...(state ? { state } : {}),
    ...(action !== undefined ? { action: validateName(action, 'action') } : {}),
    ...(tenant !== undefined ? { tenant: validateName(tenant, 'tenant') } : {}),
    ...(olderThan !== undefined ? { updatedBefore: now - toMs(olderThan, 'olderThan') } : {}),
    ...(cursor ? { cursor } : {}),
  };
}

/** Refuses a settlement note that is not text of at most NOTE_MAX characters (INVALID_ARGUMENT). */
export function checkNote(note: unknown): void {
  if (note !== undefined && (typeof note !== 'string' || note.length > NOTE_MAX))
    throw new InvalidArgumentError(`note must be text of at most ${NOTE_MAX} characters`);
}

/**
 * The write that settles `record` with `resolution` (times relative to the store's clock), and the
 * answer it is counted as; NOT_RESOLVABLE when the record is neither unknown nor stalled.
 */
export function settlementPatch(
  record: PublicRecord,
  resolution: Resolution,
  options: { by?: string; note?: string },
  expiresAt: number | null,
  now: number,
): { patch: RecordPatch; answer: 'value' | 'error' | 'retry' } {
  const by = checkSettler(options.by ?? 'person');
  checkNote(options.note);
  const stalled = record.state === 'in_progress' && (record.leaseUntil ?? 0) <= now;
  if (record.state !== 'unknown' && !stalled)
    throw new OncelyError(
      'NOT_RESOLVABLE',
      `record is ${record.state}; only unknown or stalled records can be resolved`,
      {
        record: publicRecord(record as StoredRecord),
      },
    );
  const answer = resolution === 'retry' ? 'retry' : 'value' in resolution ? 'value' : 'error';
  const settlement = { by, at: now, answer, ...(options.note ? { note: options.note } : {}) } as const;
  const finished = { leaseUntil: null, completedAt: 0, updatedAt: 0, expiresAt, settlement };
  if (resolution === 'retry')
    return { patch: { state: 'released', leaseUntil: null, updatedAt: 0, expiresAt, settlement }, answer };
  if ('value' in resolution)
    return { patch: { state: 'succeeded', result: encodeValue(resolution.value), ...finished }, answer };
  return { patch: { state: 'failed', result: encodeError(resolution.error), ...finished }, answer };
}
