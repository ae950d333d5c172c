import type { HostLog } from './context.js';
import type { SourceConfig } from './webhooks.js';

/** An app's `oncely.config.ts`: its webhook sources, how a request names its tenant, and its database. */
export interface HostConfig {
  /** Webhook sources by the name used in `POST /v1/webhooks/:source`. */
  sources?: Record<string, SourceConfig>;
  /** The tenant of an invocation, from its headers (an API key or account). Default: 'default'. */
  tenant?: (headers: Record<string, string | undefined>) => string | undefined;
  /** Database when `--db` is not given: a SQLite path or a postgres:// URL. Default ./.oncely/app.db in the app folder. */
  db?: string;
  /** Event consumers: retries before a dead letter, backoff base, lease. */
  events?: { maxAttempts?: number; baseDelayMs?: number; leaseMs?: number };
  /** A structured logger (pino, winston, console-like) for failed handlers and consumers: `error(message, fields)`. Default: one line on stderr each. */
  logger?: HostLog;
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
  if (value === undefined || value === '') throw new Error(`environment variable ${name} is not set`);
  return value;
}
