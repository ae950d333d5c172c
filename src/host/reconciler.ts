import { toMs } from '../core/duration.js';
import { OncelyError } from '../core/errors.js';
import type { Metrics } from '../core/metrics.js';
import type { ObserveOptions } from '../core/observer.js';
import type { Db } from '../db/types.js';
import { createOncely, type Oncely } from '../engine/engine.js';
import type { Reconcile, ReconcileOptions, ReconcileReport } from '../engine/reconcile.js';
import { encodeResponse } from '../http/response.js';
import { sqliteStore } from '../sqlite/index.js';
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
    return { value: encodeResponse(envelope(200, { data: (answer as { value: unknown }).value }), ['content-type']) };
  };
}

/** Runs reconcile passes for the host; `close` ends the connection it may have opened. */
export interface HostReconciler {
  reconcile(options?: ReconcileOptions): Promise<ReconcileReport>;
  close(): Promise<void>;
}

/**
 * The host's reconcile passes. On PostgreSQL they run on the host's engine (its pool). On SQLite
 * on an engine of their own connection to the same file: the host's record store shares the Db's
 * one connection, where a write outside the Db's queue could land inside (or roll back) a
 * handler's open transaction.
 */
export function hostReconciler(
  db: Db,
  once: Oncely,
  app: App,
  observe: ObserveOptions & { metrics: Metrics },
): HostReconciler {
  if (db.dialect !== 'sqlite' || db.target === ':memory:')
    return { reconcile: (options) => once.reconcile(options), close: async () => {} };
  let own: Promise<Oncely> | undefined;
  const engine = () => {
    own ??= createOncely({ store: sqliteStore({ path: db.target }), tenant: 'default', ...observe }).then((e) => {
      registerReconcilers(e, app);
      return e;
    });
    return own;
  };
  return {
    reconcile: async (options) => (await engine()).reconcile(options),
    close: async () => {
      if (own) await (await own).close();
    },
  };
}
