import type { BrokerSourceConfig, BrokerTargetConfig } from '../brokers/config.js';
import { refuseUnknownKeys } from '../core/closest.js';
import type { Duration } from '../core/duration.js';
import { durationOption } from '../core/duration-option.js';
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
  /**
   * Event consumers: attempts before a dead letter (default 8), the base of the full-jitter backoff
   * between attempts (default '500ms'), and how long a claim holds before a dead worker's events are
   * taken over (default '30s'; the outbox relay's lease too).
   */
  events?: {
    maxAttempts?: number;
    backoff?: Duration;
    lease?: Duration;
    /** @deprecated Write `backoff`; goes in 0.2.0. */
    baseDelayMs?: number;
    /** @deprecated Write `lease`; goes in 0.2.0. */
    leaseMs?: number;
  };
  /** The app's flows: how long a worker's claim of a flow run holds unrenewed, so a dead worker's runs are taken over after it. Default '30s'. */
  flows?: { lease?: Duration };
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

// Every key oncely reads of a config: any other (a typo such as `retentoin`, a key of a later
// version such as `schedules`) stops the start instead of leaving a default silently in force.
const CONFIG_KEYS: Record<keyof HostConfig, true> = {
  sources: true,
  tenant: true,
  maxBodyBytes: true,
  timeout: true,
  poolSize: true,
  db: true,
  events: true,
  flows: true,
  logger: true,
  onDecision: true,
  brokers: true,
  targets: true,
  outbox: true,
  retention: true,
  effects: true,
  duplicateScan: true,
  reconcile: true,
};
const EVENTS_KEYS: Record<keyof NonNullable<HostConfig['events']>, true> = {
  maxAttempts: true,
  backoff: true,
  lease: true,
  baseDelayMs: true,
  leaseMs: true,
};
const FLOWS_KEYS: Record<keyof NonNullable<HostConfig['flows']>, true> = { lease: true };
const RECONCILE_KEYS: Record<keyof Exclude<HostConfig['reconcile'], false | undefined>, true> = {
  every: true,
  olderThan: true,
  limit: true,
};
const DUPLICATE_SCAN_KEYS: Record<keyof Exclude<HostConfig['duplicateScan'], false | undefined>, true> = {
  every: true,
};
const EFFECT_KEYS: Record<keyof NonNullable<HostConfig['effects']>[number], true> = { table: true, by: true };

/**
 * Refuses a key of `config` that oncely does not read, at the top and in the settings whose keys
 * are fixed (CONFIG_KEY_UNKNOWN naming `where`, the key and the nearest known one); `retention`
 * is checked by its own reader, sources and brokers by theirs.
 */
export function checkConfig(config: HostConfig, where: string): void {
  refuseUnknownKeys(config, Object.keys(CONFIG_KEYS), where);
  const nested: [string, unknown, Record<string, true>][] = [
    ['events', config.events, EVENTS_KEYS],
    ['flows', config.flows, FLOWS_KEYS],
    ['reconcile', config.reconcile, RECONCILE_KEYS],
    ['duplicateScan', config.duplicateScan, DUPLICATE_SCAN_KEYS],
    ...(Array.isArray(config.effects) ? config.effects : []).map(
      (effect, i) => [`effects[${i}]`, effect, EFFECT_KEYS] as [string, unknown, Record<string, true>],
    ),
  ];
  for (const [name, value, known] of nested)
    if (typeof value === 'object' && value !== null) refuseUnknownKeys(value, Object.keys(known), where, `${name}.`);
}

/** The `events` settings in milliseconds, an old `...Ms` name read with its deprecation warning; CONFIG_INVALID when unusable. */
export function eventSettings(config: HostConfig): { maxAttempts?: number; baseDelayMs: number; leaseMs: number } {
  const events = config.events ?? {};
  const where = 'oncely.config.ts events';
  return {
    maxAttempts: events.maxAttempts,
    baseDelayMs: durationOption(events, 'backoff', 'baseDelayMs', '500ms', where, 'CONFIG_INVALID'),
    leaseMs: durationOption(events, 'lease', 'leaseMs', '30s', where, 'CONFIG_INVALID'),
  };
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
