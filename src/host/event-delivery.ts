/**
 * One delivery of a claimed event inside its processing transaction: ordering by business version,
 * the consumer's prerequisite, and the wait (or dead letter) of an event that cannot be delivered yet.
 */
import { backoffDelay } from '../core/backoff.js';
import type { Clock } from '../core/clock.js';
import { OncelyError } from '../core/errors.js';
import type { Sql } from '../db/types.js';
import type { Claim, Statement, WorkQueue } from '../work/index.js';
import type { ClaimedFirst } from './claim-first.js';
import type { ClaimedRow } from './event-sql.js';
import * as q from './event-sql.js';
import type { TxCounts } from './totals.js';
import type { HostEvent } from './types.js';

const all = <R>(sql: Sql, { text, values }: Statement) => sql.all<R>(text, values);
const run = (sql: Sql, { text, values }: Statement) => sql.run(text, values);

/** How the queue runs the consumer of one (source, type). */
export interface ConsumerBinding {
  /**
   * Runs the consumer inside `tx` (the host wraps it with the idempotency engine, key = event id);
   * `counts` counts in that transaction (the outbox messages it enqueues, the engine's run).
   */
  handle(event: HostEvent, tx: Sql, counts: TxCounts, claimed?: ClaimedFirst): Promise<void>;
  /**
   * effects 'external': claims the event's record before the queue's transaction opens, committed
   * on its own; `handle` then gets it, and a delivery that does not complete it (a throw, a stale
   * or waiting event, another worker's claim of the event) abandons it after that transaction ended.
   */
  claimFirst?(event: HostEvent): Promise<ClaimedFirst>;
  /** Ordering by business version: an event older than (or equal to) the stored version of its aggregate is `stale` and not applied. */
  ordering?: { aggregate(event: HostEvent): string; version(event: HostEvent): number };
  /**
   * The consumer's prerequisite, checked in the processing transaction before it runs: false keeps
   * the event `waiting` (re-checked with backoff, no attempt used) until it holds, or until
   * `withinMs` from its receipt (or replay) passed, when it is dead-lettered.
   */
  requires?: { holds(event: HostEvent, tx: Sql): Promise<boolean>; withinMs: number };
}

/** Why an event waits instead of being delivered now, and when it stops waiting for good. */
export interface Wait {
  reason: string;
  /** The aggregate and version an ordered event waits with, so later versions wait behind it. */
  order: { aggregate: string; version: number } | undefined;
  /** Past this, a wait for the prerequisite is a dead letter; a wait behind an earlier version has none. */
  deadline?: number;
}

// A claim counts an attempt; a wait is not one, so a deferral takes it back.
const UNCOUNTED = { sql: 'attempts - 1' };

/**
 * Puts a claimed event back to `waiting` until its next check, without using up an attempt; or,
 * past its deadline, dead-letters it with the reason. Either way, in the caller's transaction.
 */
export async function defer(
  work: WorkQueue<ClaimedRow>,
  delays: { baseDelayMs: number; maxDelayMs: number },
  tx: Sql,
  claim: Claim<ClaimedRow>,
  wait: Wait,
  now: number,
): Promise<{ outcome: 'deferred'; nextAt: number } | { outcome: 'dead_lettered'; error: string }> {
  const waits = Number(claim.row.waits) + 1;
  if (wait.deadline !== undefined && now >= wait.deadline) {
    const error = `${wait.reason} within requiresWithin; dead-lettered after ${waits} check(s)`;
    await work.complete(tx, claim, 'dead', {
      attempts: UNCOUNTED,
      next_attempt_at: now,
      last_error: error,
      wait_aggregate: null,
      wait_version: null,
    });
    // What waited behind it waits no more.
    if (wait.order) await run(tx, q.wakeLater(wait.order.aggregate, wait.order.version, now));
    return { outcome: 'dead_lettered', error };
  }
  let nextAt = now + backoffDelay(waits, delays.baseDelayMs, delays.maxDelayMs);
  // Checked once more at the deadline, so the dead letter comes on time.
  if (wait.deadline !== undefined) nextAt = Math.min(nextAt, wait.deadline);
  await work.complete(tx, claim, 'waiting', {
    attempts: UNCOUNTED,
    waits,
    next_attempt_at: nextAt,
    last_error: `waiting: ${wait.reason}`,
    wait_aggregate: wait.order?.aggregate ?? null,
    wait_version: wait.order?.version ?? null,
  });
  return { outcome: 'deferred', nextAt };
}

/**
 * Runs the consumer unless the event is stale for its aggregate, or must wait (behind an earlier
 * version of its aggregate that waits, or for its prerequisite); in the caller's transaction.
 * `woke`: waiting later versions of its aggregate were made due.
 */
export async function applyEvent(
  binding: ConsumerBinding,
  event: HostEvent,
  claim: Claim<ClaimedRow>,
  tx: Sql,
  counts: TxCounts,
  clock: Clock,
  claimed?: ClaimedFirst,
): Promise<{ outcome: 'applied' | 'stale'; woke: boolean } | Wait> {
  if (!binding.ordering) {
    const wait = await unmet(binding, event, claim, tx, undefined);
    if (wait) return wait;
    await binding.handle(event, tx, counts, claimed);
    return { outcome: 'applied', woke: false };
  }
  const aggregate = binding.ordering.aggregate(event);
  const version = binding.ordering.version(event);
  if (typeof aggregate !== 'string' || aggregate.length === 0)
    throw new OncelyError('INVALID_ARGUMENT', `ordering.aggregate() of ${event.type} must return a non-empty string`);
  if (!Number.isSafeInteger(version))
    throw new OncelyError('INVALID_ARGUMENT', `ordering.version() of ${event.type} must return an integer`);
  await run(tx, q.ensureVersion(aggregate));
  // On PostgreSQL this locks the aggregate: its events are checked and applied one at a time.
  const [stored] = await all<{ version: number | string | null }>(tx, q.readVersion(tx.dialect, aggregate));
  const storedVersion = stored && stored.version !== null ? Number(stored.version) : null;
  if (storedVersion !== null && version <= storedVersion) return { outcome: 'stale', woke: false };
  // A statement of its own after the lock, not a subquery of the locking read: on PostgreSQL a read
  // that waited for the lock still sees other rows as they were when it began.
  const [held] = await all<{ earliest: number | string | null; latest: number | string | null }>(
    tx,
    q.heldVersions(aggregate, storedVersion, event.source, event.id),
  );
  const order = { aggregate, version };
  if (held?.earliest != null && Number(held.earliest) < version)
    return { reason: `behind version ${held.earliest} of aggregate ${aggregate}, which waits`, order };
  const wait = await unmet(binding, event, claim, tx, order);
  if (wait) return wait;
  await binding.handle(event, tx, counts, claimed);
  await run(tx, q.writeVersion(version, aggregate));
  const woke = held?.latest != null && Number(held.latest) > version;
  if (woke) await run(tx, q.wakeLater(aggregate, version, clock.now()));
  return { outcome: 'applied', woke };
}

/** The wait of an event whose consumer's prerequisite does not hold; undefined when it holds or none is declared. */
async function unmet(
  binding: ConsumerBinding,
  event: HostEvent,
  claim: Claim<ClaimedRow>,
  tx: Sql,
  order: Wait['order'],
): Promise<Wait | undefined> {
  if (!binding.requires || (await binding.requires.holds(event, tx))) return undefined;
  const from = claim.row.wait_from === null ? event.receivedAt : Number(claim.row.wait_from);
  return { reason: 'prerequisite not met', order, deadline: from + binding.requires.withinMs };
}
