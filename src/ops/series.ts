/**
 * The history behind the dashboard's charts: a snapshot of the four rates' totals once a minute in
 * `oncely_stats_samples` (component `dashboard` of the migration ledger), kept 25 hours, so the
 * last hour and the last day can be drawn. The totals are the database's (every process's), so
 * one sample per minute is enough whichever host takes it: the minute is the primary key.
 */

import { type Rates, type RateTotals, rates } from '../core/metrics.js';
import type { OncelyLogger } from '../core/observer.js';
import { type Migrations, migrate } from '../db/migrate.js';
import type { Db, Sql } from '../db/types.js';
import { type Scheduled, schedule } from './schedule.js';

/** How often a host samples, and how long samples are kept (a day's chart and an hour of slack). */
export const SAMPLE_EVERY_MS = 60_000;
export const SAMPLES_KEPT_MS = 25 * 3_600_000;

/** The windows the series route draws. */
export const SERIES_WINDOWS = { '1h': 3_600_000, '24h': 24 * 3_600_000 } as const;

const DDL = `CREATE TABLE IF NOT EXISTS oncely_stats_samples (
  at BIGINT PRIMARY KEY,
  totals TEXT NOT NULL
)`;

/** The dashboard component's versioned tables. */
export const seriesMigrations: Migrations = {
  component: 'dashboard',
  steps: [{ version: 1, sqlite: DDL, postgres: DDL }],
};

/** Creates the samples table; safe from several processes at once. */
export function migrateSeries(db: Db): Promise<void> {
  return migrate(db, seriesMigrations);
}

/** One sample: its minute (epoch ms), the totals then, and the four rates they give (NaN, null in JSON, with nothing counted). */
export interface Sample {
  at: number;
  rateTotals: RateTotals;
  rates: Rates;
}

/**
 * Stores the totals of this minute unless another host stored them already, and deletes the samples
 * past SAMPLES_KEPT_MS (the table stays ~1,500 rows without a retention setting of its own).
 */
export async function takeSample(sql: Sql, totals: RateTotals, now = Date.now()): Promise<void> {
  const minute = now - (now % SAMPLE_EVERY_MS);
  await sql.run('INSERT INTO oncely_stats_samples (at, totals) VALUES (?, ?) ON CONFLICT (at) DO NOTHING', [
    minute,
    JSON.stringify(totals),
  ]);
  await sql.run('DELETE FROM oncely_stats_samples WHERE at < ?', [now - SAMPLES_KEPT_MS]);
}

/**
 * Samples `totals()` (the database's rate totals, this process's flushed first) every minute on the
 * one scheduler; the first sample a second after start, so a chart has a point without waiting.
 */
export function sampleEveryMinute(
  db: Db,
  totals: () => Promise<RateTotals>,
  options: { logger?: OncelyLogger } = {},
): Scheduled {
  return schedule('stats sample', SAMPLE_EVERY_MS, async () => takeSample(db, await totals()), {
    ...options,
    firstAfterMs: 1_000,
  });
}

/** The samples of the last `windowMs`, oldest first. */
export async function readSeries(sql: Sql, windowMs: number, now = Date.now()): Promise<Sample[]> {
  const rows = await sql.all<{ at: number | string; totals: string }>(
    'SELECT at, totals FROM oncely_stats_samples WHERE at >= ? ORDER BY at',
    [now - windowMs],
  );
  return rows.map((row) => {
    const rateTotals = JSON.parse(row.totals) as RateTotals;
    return { at: Number(row.at), rateTotals, rates: rates(rateTotals) };
  });
}
