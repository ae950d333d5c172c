/** The host's totals and the four rates with their targets: what `GET /v1/stats` and `oncely stats` answer. */
import { RATE_TARGETS, type Rates, type RateTotals, rates } from '../core/metrics.js';
import type { TotalSeries, Totals } from './totals.js';

/** One of the four rates: NaN (null in JSON) until its denominator counted something. */
export interface RateStat {
  value: number;
  /** The method's target, where it sets one. */
  target: number | null;
}

/** The totals and the four rates, summed over every process of the database and every restart. */
export interface HostStats {
  rates: Record<keyof Rates, RateStat>;
  /** What the rates are computed from. */
  rateTotals: RateTotals;
  /** Every counter's series. */
  totals: Record<string, TotalSeries[]>;
}

const RATE_NAMES = ['duplicateInterception', 'keyHit', 'staleDrop', 'compensationSuccess'] as const;

/** Reads the totals and computes the four rates from them, one definition with a process's own: rates(). */
export async function hostStats(totals: Totals): Promise<HostStats> {
  const { totals: series, rateTotals: summed } = await totals.summary();
  const now = rates(summed);
  const targets: Partial<Record<keyof Rates, number>> = RATE_TARGETS;
  return {
    rates: Object.fromEntries(
      RATE_NAMES.map((name) => [name, { value: now[name], target: targets[name] ?? null }]),
    ) as Record<keyof Rates, RateStat>,
    rateTotals: summed,
    totals: series,
  };
}

/** JSON of a value holding stats: a rate with nothing counted yet (NaN) is null, since JSON has no NaN. */
export function statsJson(value: unknown, space?: number): string {
  return JSON.stringify(value, (_, v) => (typeof v === 'number' && Number.isNaN(v) ? null : v), space);
}

// Each rate's numerator and denominator in RateTotals, and how it reads.
const PARTS: Record<keyof Rates, [keyof RateTotals, keyof RateTotals, string]> = {
  duplicateInterception: ['duplicatesIntercepted', 'duplicates', 'duplicate interception'],
  keyHit: ['keyHits', 'calls', 'key hit'],
  staleDrop: ['staleEvents', 'orderedEvents', 'stale drop'],
  compensationSuccess: ['compensationsSucceeded', 'compensations', 'compensation success'],
};

/** The stats as `oncely stats` prints them: the four rates with targets, then every total series. */
export function statsText(stats: HostStats): string {
  const lines = ['rate                     value     of                target'];
  for (const name of RATE_NAMES) {
    const [top, bottom, label] = PARTS[name];
    const { value, target } = stats.rates[name];
    const shown = Number.isNaN(value) ? 'n/a' : percent(value);
    const of = `${stats.rateTotals[top]} / ${stats.rateTotals[bottom]}`;
    lines.push(
      `${label.padEnd(25)}${shown.padEnd(10)}${of.padEnd(18)}${target === null ? '-' : `>= ${percent(target)}`}`,
    );
  }
  lines.push('', 'totals');
  const names = Object.keys(stats.totals).sort();
  if (names.length === 0) lines.push('  (nothing counted yet)');
  for (const name of names)
    for (const { labels, value } of stats.totals[name] ?? []) {
      const set = Object.entries(labels).map(([label, v]) => `${label}=${JSON.stringify(v)}`);
      lines.push(`  ${name}{${set.join(',')}} ${value}`);
    }
  return lines.join('\n');
}

function percent(value: number): string {
  return `${(value * 100).toFixed(value === 1 || value === 0 ? 0 : 2)}%`;
}
