import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';
import type { Db } from '../../src/db/types.js';
import { purge, retentionSettings } from '../../src/ops/retention.js';
import { startWorker } from '../support/spawn.js';
import { until } from '../support/wait.js';
import { DATABASES, DAY, migratedHost } from './retention-fixture.js';

const WRITER = fileURLToPath(new URL('./retention-writer.ts', import.meta.url));
const OLD_ROWS = 100_000;

/** 100,000 old applied events in one statement, and live rows of every kept state beside them. */
async function fill(db: Db, old: number): Promise<void> {
  const columns =
    '(source, event_id, type, payload, status, attempts, next_attempt_at, lease_until, received_at, updated_at)';
  const rows = `'bulk', 'old-' || i, 'order.paid', '{}', 'applied', 1, ${old}, NULL, ${old}, ${old}`;
  await db.run(
    db.dialect === 'sqlite'
      ? `WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ${OLD_ROWS})
         INSERT INTO oncely_events ${columns} SELECT ${rows} FROM n`
      : `INSERT INTO oncely_events ${columns} SELECT ${rows} FROM generate_series(1, ${OLD_ROWS}) AS i`,
  );
  // Old as well, and never purged: waiting work, work in hand, dead letters.
  for (const [status, n] of [
    ['pending', 300],
    ['processing', 50],
    ['dead', 50],
  ] as const)
    await db.run(
      db.dialect === 'sqlite'
        ? `WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ${n})
           INSERT INTO oncely_events ${columns}
           SELECT 'kept', '${status}-' || i, 'order.paid', '{}', '${status}', 1, ${old}, ${status === 'processing' ? Date.now() + 600_000 : 'NULL'}, ${old}, ${old} FROM n`
        : `INSERT INTO oncely_events ${columns}
           SELECT 'kept', '${status}-' || i, 'order.paid', '{}', '${status}', 1, ${old}, ${status === 'processing' ? Date.now() + 600_000 : 'NULL'}, ${old}, ${old}
           FROM generate_series(1, ${n}) AS i`,
    );
}

/** What the writer process reports (test/ops/retention-writer.ts). */
interface WriterReport {
  intakes: number;
  claims: number;
  maxIntakeMs: number;
  maxClaimMs: number;
  p99Ms: number;
}

const countOf = async (db: Db, where: string) =>
  Number((await db.all<{ n: number | string }>(`SELECT COUNT(*) AS n FROM oncely_events WHERE ${where}`))[0]?.n);

for (const database of DATABASES) {
  describe(`retention of 100,000 rows on ${database.name}`, () => {
    const cleanups: (() => Promise<void>)[] = [];
    afterEach(async () => {
      for (const c of cleanups.splice(0).reverse()) await c();
    });

    it('purges in batches of at most `batch` rows while a live writer in another process intakes and claims', async () => {
      const { target, cleanup } = database.fresh();
      cleanups.push(cleanup);
      const { host, db } = await migratedHost(target);
      cleanups.push(() => host.stop());
      const filled = performance.now();
      await fill(db, Date.now() - 60 * DAY);
      const fillMs = performance.now() - filled;

      // A pass stops at maxBatches: ten DELETEs of 1000, and exactly 90,000 left for the next pass.
      const first: number[] = [];
      await purge(db, retentionSettings({ batch: 1000, maxBatches: 10 }), {
        onBatch: (table, rows) => table === 'oncely_events' && first.push(rows),
      });
      expect(first).toEqual(Array(10).fill(1000));
      expect(await countOf(db, "source = 'bulk'")).toBe(OLD_ROWS - 10_000);

      const writer = startWorker({ target }, WRITER);
      cleanups.push(async () => {
        writer.child.kill('SIGKILL');
        await writer.exited;
      });
      const reports: string[] = [];
      createInterface({ input: writer.child.stdout }).on('line', (l) => l.startsWith('{') && reports.push(l));
      const report = async (): Promise<WriterReport> => {
        const seen = reports.length;
        writer.child.stdin.write('report\n');
        const line = await until("the writer's report", () => reports[seen]);
        return JSON.parse(line as string);
      };
      await writer.waitFor('ready');
      await report();
      const quiet = performance.now();
      // sleep: the writer works alone for a second, the baseline the purge is measured against.
      await new Promise((r) => setTimeout(r, 1_000));
      const baseline = await report();
      const baselineMs = performance.now() - quiet;

      const batches: { rows: number; ms: number }[] = [];
      const started = performance.now();
      const passed = await purge(db, retentionSettings({ batch: 1000, maxBatches: 1000 }), {
        onBatch: (table, rows, ms) => table === 'oncely_events' && batches.push({ rows, ms }),
        metrics: host.metrics,
      });
      const purgeMs = performance.now() - started;
      const live = await report();
      writer.child.stdin.write('stop\n');
      expect((await writer.exited).code).toBe(0);

      // Every DELETE touched at most 1000 rows: 90 full batches, then one that found nothing.
      expect(batches.every((b) => b.rows <= 1000)).toBe(true);
      expect(batches.map((b) => b.rows)).toEqual([...Array(90).fill(1000), 0]);
      expect(passed.tables.find((t) => t.table === 'oncely_events')).toMatchObject({ rows: 90_000, batches: 91 });
      expect(host.metrics.value('oncely_purged_total', ['oncely_events'])).toBe(90_000);
      expect(await countOf(db, "source = 'bulk'")).toBe(0);
      // Nothing live went: the old pending (some claimed by the writer since), processing and dead rows, and every intake.
      expect(await countOf(db, "source = 'kept' AND status IN ('pending', 'processing')")).toBe(350);
      expect(await countOf(db, "source = 'kept' AND status = 'dead'")).toBe(50);
      expect(await countOf(db, "source = 'live'")).toBeGreaterThanOrEqual(baseline.intakes + live.intakes);

      // The writer kept going between batches: its longest wait is a few batches, not the whole purge.
      const longestBatch = Math.max(...batches.map((b) => b.ms));
      const longestWait = Math.max(live.maxIntakeMs, live.maxClaimMs);
      console.log(
        `${database.name}: fill ${OLD_ROWS} rows ${Math.round(fillMs)} ms; purge 90,000 in ${batches.length} batches ` +
          `${Math.round(purgeMs)} ms (longest batch ${longestBatch.toFixed(1)} ms); writer during the purge: ` +
          `${live.intakes} intakes, ${live.claims} claims, longest intake ${live.maxIntakeMs} ms, longest claim ` +
          `${live.maxClaimMs} ms, p99 ${live.p99Ms} ms; before it: ${baseline.intakes} intakes in ${Math.round(baselineMs)} ms, ` +
          `longest ${Math.max(baseline.maxIntakeMs, baseline.maxClaimMs)} ms, p99 ${baseline.p99Ms} ms`,
      );
      expect(live.intakes).toBeGreaterThanOrEqual(5);
      // A few batches, plus SQLite's busy handler, whose sleeps between retries grow to 100 ms each.
      // Generous, for a loaded CI: a writer shut out for the whole purge would wait for all 90 batches.
      expect(longestWait).toBeLessThan(10 * longestBatch + 1_000);
    }, 120_000);
  });
}
