import { randomUUID } from 'node:crypto';
import type { Clock } from '../core/clock.js';
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
  /**
   * A deterministic UUID for `scope` under this key. Without a key it throws KEY_REQUIRED, which the
   * host answers 400: the caller must send an Idempotency-Key (the host never invents one).
   */
  stableId(scope: string): string;
  /** Log lines of this execution in pino's shape, `ctx.log.info({ orderId }, 'order paid')`, tagged with its trace and request ids. */
  readonly log: OncelyLogger;
  /** Data primitives bound to this execution's transaction. */
  readonly store: DataStore;
  /**
   * Starts flows in this execution's transaction: they exist only if it commits. Rejects with
   * KEY_REQUIRED or KEY_INVALID (a seed field missing or unusable), FLOW_INPUT_MISMATCH (the seed's
   * flow was started with another input) or FLOWS_UNAVAILABLE (the app has no flows/ folder).
   */
  readonly flows: {
    start<I>(flow: FlowDefinition<I, unknown>, input: I): Promise<{ workflowId: string; already: boolean }>;
  };
  /** Messages written in this execution's transaction, delivered after it commits; without `id` it needs a key, as stableId. */
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
  /** The host's clock: when an enqueued outbox message is written and due. Default the system's. */
  clock?: Clock;
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
  // A keyless request to a handler that does not require a key: ids derived from the key are the
  // caller's contract (send Idempotency-Key), so the refusal is 400 KEY_REQUIRED, never a 500.
  const keyed = (what: string): RunContext => {
    if (run) return run;
    throw new KeyRequiredError(
      `${what} needs an idempotency key and this request had none: send the Idempotency-Key header`,
    );
  };
  const stableId = (scope: string) => {
    const { tenant: keyTenant, action, idempotencyKey } = keyed(`ctx.stableId(${JSON.stringify(scope)})`);
    return stableUuid(keyTenant, action, idempotencyKey, scope);
  };
  let sequence = 0;
  const line =
    (level: keyof OncelyLogger) =>
    (fields: Record<string, unknown>, message: string): void => {
      if (logger) logger[level]({ ...fields, traceId, requestId }, message);
      else process.stderr.write(`${logLine({ ...fields, level, time: Date.now(), traceId, requestId, message })}\n`);
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
      // async: a refusal is a rejection like the others, never a throw out of the call itself.
      start: async (flow, input) => {
        if (!flows) throw new OncelyError('FLOWS_UNAVAILABLE', 'this app has no flows/ folder');
        return flows.start(flow, input, { tx, traceId });
      },
    },
    outbox: {
      // The default id comes from the key and the enqueue's position, so a re-run enqueues nothing new.
      enqueue: async (topic, payload, options = {}) => {
        let id = options.id;
        if (id === undefined) {
          const { tenant: keyTenant, action, idempotencyKey } = keyed('ctx.outbox.enqueue without options.id');
          id = stableUuid(keyTenant, action, idempotencyKey, `outbox:${topic}:${sequence++}`);
        }
        const written = await enqueue(tx, id, topic, payload, deps.clock?.now(), traceId);
        if (written.created) await count('oncely_outbox_total', [topic, 'enqueued']);
        return written;
      },
    },
  };
}

/**
 * One JSON log line that never fails the execution it logs: a bigint is written as its digits, and
 * fields JSON cannot carry (a cycle) are replaced by a note, keeping the ids and the message.
 */
function logLine(line: Record<string, unknown>): string {
  try {
    return JSON.stringify(line, (_name, value) => (typeof value === 'bigint' ? value.toString() : value));
  } catch (error) {
    const { level, time, traceId, requestId, message } = line;
    return JSON.stringify({ level, time, traceId, requestId, message, fieldsError: (error as Error).message });
  }
}
