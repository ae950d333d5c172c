import type { BrokerSourceConfig, BrokerTargetConfig } from '../brokers/config.js';
import type { Duration } from '../core/duration.js';
import { OncelyError } from '../core/errors.js';
import type { DecisionEvent, OncelyLogger } from '../core/observer.js';
import type { RetentionConfig } from '../ops/retention.js';
import type { SourceConfig } from './webhooks.js';

/** Limits of one webhook source, beside how it is read and verified. */
export interface SourceLimits {
  /** Largest request body in bytes; larger ones get 413 before more is read (and before any signature check). Default 1 MiB. */
  maxBodyBytes?: number;
}

/** An app's `oncely.config.ts`: its webhook sources, how a request names its tenant, and its database. */
export interface HostConfig {
  /** Webhook sources by the name used in `POST /v1/webhooks/:source`. */
  sources?: Record<string, SourceConfig & SourceLimits>;
  /**
   * The tenant of an invocation, from its headers. It must name the authenticated principal (an
   * account resolved from a verified API key or token), never a value the client picks freely:
   * keys, records and stable ids are scoped by it. Default: 'default'.
   */
  tenant?: (headers: Record<string, string | undefined>) => string | undefined;
  /** Largest invoke request body in bytes; larger ones get 413 before more is read. Default 1 MiB. */
  maxBodyBytes?: number;
  /** How long a handler or consumer may run unless it exports its own `timeout`; then it rolls back. Default '30s'. */
  timeout?: Duration;
  /** PostgreSQL: connections in this process's pool (`--pool-size` overrides). Default 10. */
  poolSize?: number;
  /** Database when `--db` is not given: a SQLite path or a postgres:// URL. Default ./.oncely/app.db in the app folder. */
  db?: string;
  /** Event consumers: retries before a dead letter, backoff base, lease. */
  events?: { maxAttempts?: number; baseDelayMs?: number; leaseMs?: number };
  /**
   * A structured logger in pino's shape, `{ info, warn, error }(fields, message)`: failed handlers
   * and consumers, decisions worth a line (replays, key reuse, stale events, dead letters), and
   * handlers' `ctx.log`. Default: failures and `ctx.log` as one JSON line on stderr, decisions silent.
   */
  logger?: OncelyLogger;
  /** Gets every decision of the host's engine, event queue and outbox (executed ones included); its errors are swallowed. */
  onDecision?: (decision: DecisionEvent) => void;
  /**
   * Broker sources by the event source name their messages are stored under, beside the webhook
   * `sources` (a name is one or the other): a message is acked once its event row is committed.
   */
  brokers?: Record<string, BrokerSourceConfig>;
  /** Outbox targets on brokers, by the name `outbox` routes topics to. */
  targets?: Record<string, BrokerTargetConfig>;
  /**
   * Where each outbox topic goes: names in `targets` and/or 'consumers' (the app's own consumers),
   * e.g. `{ 'order.paid': ['consumers', 'nats'] }`. A topic not listed goes to 'consumers'.
   */
  outbox?: Record<string, readonly string[]>;
  /**
   * How long finished rows are kept and how often `oncely serve` purges them (README "Retention"
   * has the defaults); `false` stops the scheduled purges (`oncely purge` still runs).
   */
  retention?: RetentionConfig | false;
  /**
   * Effect tables and the columns (camelCase, as `ctx.store` names them) that name one business
   * intent, e.g. `[{ table: 'ledger', by: ['orderId', 'kind'] }]`: the duplicate scan reports rows
   * sharing them. An unknown table or column fails at start (TABLE_UNKNOWN, COLUMN_UNKNOWN).
   */
  effects?: { table: string; by: string[] }[];
  /** How often `oncely serve` scans `effects` for residual duplicates (default every '24h'); false: only on demand. */
  duplicateScan?: { every?: Duration } | false;
  /**
   * The reconciler of `oncely serve` (README "Reconciliation"): a pass every `every` (default
   * '1m') over records last written `olderThan` ago (default '1m'), asking at most `limit`
   * (default 100); false: only on demand (`oncely reconcile`).
   */
  reconcile?: { every?: Duration; olderThan?: Duration; limit?: number } | false;
}

/**
 * Declares an app's configuration with types checked.
 * @example export default defineConfig({ sources: { shop: { kind: 'standard-webhooks', secret: env('SHOP_WEBHOOK_SECRET') } } })
 */
export function defineConfig(config: HostConfig): HostConfig {
  return config;
}

/** Reads a secret from the environment; a missing one fails at start, not at the first webhook. */
export function env(name: string, fallback?: string): string {
  const value = process.env[name] ?? fallback;
  if (value === undefined || value === '')
    throw new OncelyError('CONFIG_INVALID', `environment variable ${name} is not set`);
  return value;
}
