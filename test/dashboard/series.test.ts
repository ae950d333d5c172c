/**
 * The charts' history (src/ops/series.ts) on SQLite and PostgreSQL: one sample per minute whichever
 * host takes it, samples past 25 hours purged, a window read oldest first with the rates computed,
 * and the admin route refusing a window it does not draw.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { RateTotals } from '../../src/core/metrics.js';
import { openDb } from '../../src/db/index.js';
import type { Db } from '../../src/db/types.js';
import { migrateSeries, readSeries, SAMPLES_KEPT_MS, takeSample } from '../../src/ops/series.js';
import { hostTargets } from '../support/host-app.js';

const totals = (duplicates: number, intercepted: number): RateTotals => ({
  duplicatesIntercepted: intercepted,
  duplicates,
  keyHits: 0,
  calls: 0,
  staleEvents: 0,
  orderedEvents: 0,
  compensationsSucceeded: 0,
  compensations: 0,
});

describe.each(hostTargets())('stats samples on $name', ({ target, cleanup }) => {
  let db: Db;
  let other: Db;
  beforeAll(async () => {
    const where = target();
    db = await openDb(where);
    other = await openDb(where);
    await migrateSeries(db);
    await migrateSeries(other);
  });
  afterAll(async () => {
    await db?.close();
    await other?.close();
    await cleanup();
  });

  it('keeps one sample a minute, the first host to take it wins; reads a window oldest first with its rates', async () => {
    const now = Date.UTC(2026, 0, 1, 12, 0, 30);
    await takeSample(db, totals(10, 9), now - 120_000);
    // Two hosts in the same minute: the second's sample of that minute is not stored again.
    await takeSample(db, totals(20, 20), now);
    await takeSample(other, totals(21, 20), now + 10_000);
    const samples = await readSeries(db, 3_600_000, now + 10_000);
    expect(samples.map((s) => s.at)).toEqual([now - 30_000 - 120_000, now - 30_000]);
    expect(samples.map((s) => s.rates.duplicateInterception)).toEqual([0.9, 1]);
    expect(samples[1]?.rateTotals.duplicates).toBe(20);
    expect(Number.isNaN(samples[0]?.rates.keyHit)).toBe(true);
    // A window of one minute holds only the last.
    expect((await readSeries(db, 60_000, now + 10_000)).length).toBe(1);
  });

  it('purges samples older than 25 hours as it samples', async () => {
    const now = Date.UTC(2026, 0, 3, 12, 0, 0);
    await takeSample(db, totals(1, 1), now - SAMPLES_KEPT_MS - 60_000);
    expect((await readSeries(db, 3 * SAMPLES_KEPT_MS, now)).length).toBeGreaterThan(0);
    await takeSample(db, totals(2, 2), now);
    const left = await readSeries(db, 10 * SAMPLES_KEPT_MS, now);
    expect(left.map((s) => s.at)).toEqual([now]);
  });
});
