import type { Clock } from '../core/clock.js';
import { OncelyError } from '../core/errors.js';
import type { Sql } from '../db/types.js';
import type { RunContext } from '../engine/context.js';
import type { ClaimIn, Oncely } from '../engine/engine.js';
import type { Flows } from '../flows/flows.js';
import { type ConsumerModule, claimDeclarations, requiresWithinMs } from './app.js';
import { claimFirst } from './claim-first.js';
import type { HostConfig } from './config.js';
import { hostContext } from './context.js';
import { createDataStore } from './data-store.js';
import { STATEMENT_TIMEOUT, timeoutMs, withinTimeout } from './deadline.js';
import type { ConsumerBinding } from './events.js';
import type { AppSchema } from './schema.js';
import type { TxCounts } from './totals.js';
import type { HostEvent } from './types.js';

/** What a consumer needs from the host. */
export interface ConsumeDeps {
  once: Oncely;
  /** A transaction of the host's Db for a claim-first write (effects 'external'). */
  claimIn: ClaimIn;
  config: HostConfig;
  schema: () => AppSchema;
  flows: Flows | undefined;
  /** The host's clock: when the outbox messages a consumer enqueues are written and due. Default the system's. */
  clock?: Clock;
}

/** The engine's action of a consumer's runs (its records, its reconcile function). */
export function consumerAction(source: string, type: string): string {
  return `consume:${source}/${type}`;
}

/** The TTL of a consumer's records: an event id is deduplicated for a week. */
export const CONSUMER_TTL = '7d';

/**
 * The binding the event queue runs for one consumer: under a claim keyed by the event id, in the
 * queue's transaction, for at most the consumer's timeout. A consumer that runs past it throws
 * HANDLER_TIMEOUT, so its transaction rolls back and the attempt counts as failed (retried with
 * backoff, then a dead letter). Events carry no request headers: consumers run under the
 * engine's default tenant.
 */
export function bindConsumer(
  source: string,
  type: string,
  consumer: ConsumerModule,
  deps: ConsumeDeps,
): ConsumerBinding {
  const { once, schema, flows } = deps;
  const { logger } = deps.config;
  const ms = timeoutMs(consumer.timeout, deps.config.timeout);
  const what = `consumer ${source}/${type}`;
  const action = consumerAction(source, type);
  const { external, lease, onLeaseExpired, onError } = claimDeclarations(consumer, what);
  const { requires } = consumer;
  // Under the consumer's timeout too: a prerequisite that hangs must not hold the event's lock.
  const prerequisite: ConsumerBinding['requires'] = requires && {
    withinMs: requiresWithinMs(consumer, what),
    holds: async (event, tx) => {
      if (tx.dialect === 'postgres') await tx.run(`SELECT ${STATEMENT_TIMEOUT}`, [String(ms)]);
      const held = await withinTimeout(tx, ms, `requires of ${what}`, async (guarded) => {
        const { get, find } = createDataStore(guarded, schema());
        return requires.call(consumer, event, { store: { get, find } });
      });
      if (typeof held !== 'boolean')
        throw new OncelyError('INVALID_ARGUMENT', `requires of ${what} must answer true or false, not ${typeof held}`);
      return held;
    },
  };
  const run = (event: HostEvent, tx: Sql, ctx: RunContext, counts: TxCounts) =>
    withinTimeout(tx, ms, what, async (guarded) => {
      await consumer.handle(
        event,
        hostContext(guarded, createDataStore(guarded, schema(), { count: counts.count }), ctx, ctx.tenant, {
          flows,
          logger,
          count: counts.count,
          clock: deps.clock,
        }),
      );
      return null;
    });
  if (external)
    return {
      ordering: consumer.ordering,
      requires: prerequisite,
      // Before the queue's transaction, committed on its own: a crash mid-call leaves the claim.
      claimFirst: (event) =>
        claimFirst(once, {
          action,
          key: event.id,
          input: event.data,
          claimIn: deps.claimIn,
          ttl: CONSUMER_TTL,
          lease,
          onLeaseExpired,
          onError,
          surface: 'consumer',
          traceId: event.traceId,
        }),
      handle: async (event, tx, counts, claimed) => {
        if (tx.dialect === 'postgres') await tx.run(`SELECT ${STATEMENT_TIMEOUT}`, [String(ms)]);
        // Answered (a replay): the consumer ran before, and the event is applied without it.
        if (claimed?.kind === 'claimed') {
          await run(event, tx, claimed.context, counts);
          await claimed.complete(tx.handle);
        }
        await counts.engine('consumer', action);
      },
    };
  return {
    ordering: consumer.ordering,
    requires: prerequisite,
    handle: async (event, tx, counts) => {
      if (tx.dialect === 'postgres') await tx.run(`SELECT ${STATEMENT_TIMEOUT}`, [String(ms)]);
      await once.run(
        {
          action,
          key: event.id,
          input: event.data,
          tx: tx.handle,
          ttl: CONSUMER_TTL,
          lease,
          surface: 'consumer',
          traceId: event.traceId,
        },
        (ctx) => run(event, tx, ctx, counts),
      );
      // The engine's counts of this run commit with the event's completion.
      await counts.engine('consumer', action);
    },
  };
}
