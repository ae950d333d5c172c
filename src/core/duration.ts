import { InvalidArgumentError } from './errors.js';

/** A span of time: milliseconds as a number, or text such as '250ms', '30s', '5m', '24h', '7d'. */
export type Duration = number | `${number}${'ms' | 's' | 'm' | 'h' | 'd'}`;

/** A record lifetime: a duration, or 'permanent' for records that never expire. */
export type Ttl = Duration | 'permanent';

const UNIT_MS = { ms: 1, s: 1_000, m: 60_000, h: 3_600_000, d: 86_400_000 } as const;
const PATTERN = /^(\d+(?:\.\d+)?)(ms|s|m|h|d)$/;

/** Converts a duration to milliseconds; throws INVALID_ARGUMENT naming `what` on anything else. */
export function toMs(value: Duration, what: string): number {
  if (typeof value === 'number') {
    if (Number.isFinite(value) && value >= 0) return Math.round(value);
    throw new InvalidArgumentError(`${what} must be a non-negative number of milliseconds, got ${value}`);
  }
  const match = typeof value === 'string' ? PATTERN.exec(value.trim()) : null;
  if (!match)
    throw new InvalidArgumentError(`${what} must look like '500ms', '30s', '5m', '24h' or '7d', got ${String(value)}`);
  return Math.round(Number(match[1]) * UNIT_MS[match[2] as keyof typeof UNIT_MS]);
}

/** Converts a TTL to milliseconds, with `null` meaning permanent. */
export function ttlToMs(value: Ttl, what = 'ttl'): number | null {
  return value === 'permanent' ? null : toMs(value, what);
}
