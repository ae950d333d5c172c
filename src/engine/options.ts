import { type Duration, type Ttl, toMs, ttlToMs } from '../core/duration.js';
import { InvalidArgumentError } from '../core/errors.js';
import type { LeaseExpiredPolicy } from '../core/record.js';

/** Which failures are stored and replayed; the rest release the key for a retry. */
export type ErrorPolicy = 'release' | 'store' | ((error: unknown) => boolean);

/** Per-action behaviour; each may be set in `createOncely({ defaults })`, `wrap` or `run`. */
export interface ActionOptions {
  /** How long a finished record answers replays: a duration or 'permanent'. Default '24h'. */
  ttl?: Ttl;
  /** How long a claim holds without renewal. Renewed every third of it while the function runs. Default '30s'. */
  lease?: Duration;
  /** When another caller holds the key, wait this long for its outcome instead of failing with IN_PROGRESS. */
  wait?: Duration | false;
  /** Failures to store ('store', or a predicate returning true); by default the key is released. */
  onError?: ErrorPolicy;
  /** When a holder vanished: 'retry' lets the next caller take over, 'hold' marks the record unknown. */
  onLeaseExpired?: LeaseExpiredPolicy;
  /** Largest stored result in bytes of JSON; a bigger result is stored as a RESULT_TOO_LARGE failure. Default 1 MiB. */
  maxResultBytes?: number;
  /**
   * How long to keep retrying the write of an outcome the store failed to take (the function
   * already ran), while the lease is renewed; then OUTCOME_NOT_STORED. Default: the lease.
   */
  completionRetry?: Duration;
}

/** ActionOptions converted to milliseconds and checked. */
export interface ResolvedOptions {
  ttlMs: number | null;
  leaseMs: number;
  waitMs: number;
  onError: ErrorPolicy;
  onLeaseExpired: LeaseExpiredPolicy;
  maxResultBytes: number;
  completionRetryMs: number;
}

// completionRetry has no fixed default: it follows the lease.
const BUILT_IN: Required<Omit<ActionOptions, 'completionRetry'>> & Pick<ActionOptions, 'completionRetry'> = {
  ttl: '24h',
  lease: '30s',
  wait: false,
  onError: 'release',
  onLeaseExpired: 'retry',
  maxResultBytes: 1024 * 1024,
  completionRetry: undefined,
};

/** Merges option layers (later wins) and converts them once, so hot paths read plain numbers. */
export function resolveOptions(...layers: (ActionOptions | undefined)[]): ResolvedOptions {
  const merged = { ...BUILT_IN };
  for (const layer of layers) {
    if (!layer) continue;
    for (const [name, value] of Object.entries(layer)) {
      if (value !== undefined && name in BUILT_IN) (merged as Record<string, unknown>)[name] = value;
    }
  }
  const leaseMs = toMs(merged.lease, 'lease');
  if (leaseMs < 10) throw new InvalidArgumentError(`lease must be at least 10ms, got ${leaseMs}ms`);
  if (merged.onLeaseExpired !== 'retry' && merged.onLeaseExpired !== 'hold')
    throw new InvalidArgumentError(`onLeaseExpired must be 'retry' or 'hold', got ${String(merged.onLeaseExpired)}`);
  if (merged.onError !== 'release' && merged.onError !== 'store' && typeof merged.onError !== 'function')
    throw new InvalidArgumentError(`onError must be 'release', 'store' or a function`);
  if (!Number.isInteger(merged.maxResultBytes) || merged.maxResultBytes <= 0)
    throw new InvalidArgumentError('maxResultBytes must be a positive integer');
  return {
    ttlMs: ttlToMs(merged.ttl),
    leaseMs,
    waitMs: merged.wait === false ? 0 : toMs(merged.wait, 'wait'),
    onError: merged.onError,
    onLeaseExpired: merged.onLeaseExpired,
    maxResultBytes: merged.maxResultBytes,
    completionRetryMs: merged.completionRetry === undefined ? leaseMs : toMs(merged.completionRetry, 'completionRetry'),
  };
}

/** True when `error` must be stored under `policy` rather than release the key. */
export function storesError(policy: ErrorPolicy, error: unknown): boolean {
  if (policy === 'store') return true;
  if (policy === 'release') return false;
  return policy(error) === true;
}
