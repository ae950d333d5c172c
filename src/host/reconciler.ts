import { toMs } from '../core/duration.js';
import { OncelyError } from '../core/errors.js';
import type { Db } from '../db/types.js';
import type { Oncely } from '../engine/engine.js';
import type { Reconcile, ReconcileOptions, ReconcileReport } from '../engine/reconcile.js';
import type { Resolution } from '../engine/records.js';
import { encodeResponse } from '../http/response.js';
import type { App } from './app.js';
import type { HostConfig } from './config.js';
import { CONSUMER_TTL, consumerAction } from './consume.js';
import { envelope, handlerAction } from './invoke.js';

/** The reconciler of `oncely serve`, as the config sets it: every how long, over what, how many; null when off. */
export interface ReconcileSettings {
  everyMs: number;
  olderThanMs: number;
  limit: number;
}

/** Reads `config.reconcile` (INVALID_ARGUMENT at start for a bad one); null for `false`. */
export function reconcileSettings(config: HostConfig['reconcile']): ReconcileSettings | null {
  if (config === false) return null;
  const limit = config?.limit ?? 100;
  if (!Number.isInteger(limit) || limit < 1 || limit > 10_000)
    throw new OncelyError('CONFIG_INVALID', `reconcile.limit must be a whole number from 1 to 10000, got ${limit}`);
  const everyMs = toMs(config?.every ?? '1m', 'reconcile.every');
  if (everyMs <= 0) throw new OncelyError('CONFIG_INVALID', 'reconcile.every must be more than 0');
  return { everyMs, olderThanMs: toMs(config?.olderThan ?? '1m', 'reconcile.olderThan'), limit };
}

/** Registers the `reconcile` exports of the app's handlers and consumers on `once`, under their actions. */
export function registerReconcilers(once: Oncely, app: App): void {
  for (const [id, module] of app.handlers)
    if (module.reconcile)
      once.registerReconcile(handlerAction(id), asStoredEnvelope(module.reconcile), module.idempotency?.ttl);
  for (const [name, module] of app.consumers) {
    const [source, type] = name.split('/') as [string, string];
    if (module.reconcile) once.registerReconcile(consumerAction(source, type), module.reconcile, CONSUMER_TTL);
  }
}

/**
 * A handler's reconcile answers what `handle` would have returned; its record keeps the response
 * the invocation answered (`{ code: 0, data }`, as the gate stores it), so a duplicate replays
 * the same envelope it would have got from the handler.
 */
function asStoredEnvelope(reconcile: Reconcile): Reconcile {
  return async (record) => {
    const answer = await reconcile(record);
    if (typeof answer !== 'object' || answer === null || !Object.hasOwn(answer, 'value')) return answer;
    return { value: storedEnvelope((answer as { value: unknown }).value) };
  };
}

/** What a handler's record keeps for `value`: the response its invocation would have answered. */
function storedEnvelope(value: unknown) {
  return encodeResponse(envelope(200, { data: value }), ['content-type']);
}

/**
 * A person's settlement (the admin API's, `oncely records resolve`) as the record of `action`
 * keeps it: for a handler's action (`POST <handler>`) a value is stored as the response the
 * invocation would have answered, so the next caller is answered `{ code: 0, data: value }`.
 */
export function storedResolution(action: string, resolution: Resolution): Resolution {
  if (!action.startsWith(handlerAction('')) || typeof resolution !== 'object' || !('value' in resolution))
    return resolution;
  return { value: storedEnvelope(resolution.value) };
}

/**
 * One reconcile pass of the host's engine. On SQLite each settling write runs in a transaction of
 * the Db, in its queue: the record store shares the Db's one connection, where a write of its own
 * could land inside a handler's open transaction (or roll it back), and a second connection
 * would wait on that transaction's lock with the event loop blocked.
 */
export function hostReconcile(db: Db, once: Oncely, options: ReconcileOptions): Promise<ReconcileReport> {
  if (db.dialect !== 'sqlite') return once.reconcile(options);
  return once.reconcile({ ...options, transaction: (work) => db.transaction((tx) => work(tx.handle)) });
}
