import { randomUUID } from 'node:crypto';
import { KeyRequiredError, OncelyError } from '../core/errors.js';
import { stableUuid } from '../core/ids.js';
import type { OncelyLogger } from '../core/observer.js';
import type { Sql } from '../db/types.js';
import type { RunContext } from '../engine/context.js';
import type { FlowDefinition } from '../flows/define.js';
import type { Flows } from '../flows/flows.js';
import { enqueue } from './outbox.js';
import type { Count } from './totals.js';
import type { DataStore } from './types.js';

/** What handlers and consumers get: the key, stable ids, the data store and the outbox of their transaction. */
export interface HostContext {
  /** The Idempotency-Key of the request, or the event id; undefined for a keyless request. */
  readonly idempotencyKey: string | undefined;
  readonly tenant: string;
  readonly traceId: string;
  readonly requestId: string;
  /** A deterministic UUID for `scope` under this key; throws KEY_REQUIRED without a key (the host never invents one). */
  stableId(scope: string): string;
  /** Log lines of this execution in pino's shape, `ctx.log.info({ orderId }, 'order paid')`, tagged with its trace and request ids. */
  readonly log: OncelyLogger;
  /** Data primitives bound to this execution's transaction. */
  readonly store: DataStore;
  /** Starts flows in this execution's transaction: they exist only if it commits. */
  readonly flows: {
    start<I>(flow: FlowDefinition<I, unknown>, input: I): Promise<{ workflowId: string; already: boolean }>;
  };
  /** Messages written in this execution's transaction, delivered after it commits. */
  readonly outbox: {
    enqueue(topic: string, payload: unknown, options?: { id?: string }): Promise<{ id: string; created: boolean }>;
  };
}

/** What the host gives every execution beside its transaction: where log lines and counts go. */
export interface ContextDeps {
  flows: Flows | undefined;
  /** The app's logger; without one, lines go to stderr as JSON. */
  logger: OncelyLogger | undefined;
  /** Counts in the execution's transaction (outbox messages enqueued). */
  count: Count;
  /** The request's ids, for an execution without a claim (whose record would hold them). */
  ids?: { traceId: string | undefined; requestId: string };
}

/** Builds the context of one execution: under a claim (`run`), or keyless. */
export function hostContext(
  tx: Sql,
  store: DataStore,
  run: RunContext | undefined,
  tenant: string,
  deps: ContextDeps,
): HostContext {
  const { flows, logger, count } = deps;
  const traceId = run?.traceId ?? deps.ids?.traceId ?? randomUUID();
  const requestId = run?.requestId ?? deps.ids?.requestId ?? randomUUID();
  const stableId = (scope: string) => {
    if (!run) throw new KeyRequiredError('ctx.stableId needs an idempotency key; this request had none');
    return stableUuid(run.tenant, run.action, run.idempotencyKey, scope);
  };
  let sequence = 0;
  const line =
    (level: keyof OncelyLogger) =>
    (fields: Record<string, unknown>, message: string): void => {
      if (logger) logger[level]({ ...fields, traceId, requestId }, message);
      else
        process.stderr.write(
          `${JSON.stringify({ level, time: Date.now(), traceId, requestId, message, ...fields })}\n`,
        );
    };
  return {
    idempotencyKey: run?.idempotencyKey,
    tenant,
    traceId,
    requestId,
    stableId,
    log: { info: line('info'), warn: line('warn'), error: line('error') },
    store,
    flows: {
      start: (flow, input) => {
        if (!flows) throw new OncelyError('FLOWS_UNAVAILABLE', 'this app has no flows/ folder');
        return flows.start(flow, input, { tx });
      },
    },
    outbox: {
      // The default id comes from the key and the enqueue's position, so a re-run enqueues nothing new.
      enqueue: async (topic, payload, options = {}) => {
        const written = await enqueue(tx, options.id ?? stableId(`outbox:${topic}:${sequence++}`), topic, payload);
        if (written.created) await count('oncely_outbox_total', [topic, 'enqueued']);
        return written;
      },
    },
  };
}
