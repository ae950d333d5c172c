/**
 * The host's totals across processes and restarts: two `oncely serve` processes on one PostgreSQL
 * answer the same `GET /v1/stats`, a third started after both stopped answers it too, and
 * `oncely stats --db` prints it; databases made before the totals keep their event counts.
 */
import { type ChildProcess, execFile, spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { Metrics } from '../../src/core/metrics.js';
import { openDb } from '../../src/db/index.js';
import { migrate } from '../../src/db/migrate.js';
import { eventMigrations } from '../../src/host/event-sql.js';
import { EventQueue } from '../../src/host/events.js';
import { enqueue, OutboxRelay } from '../../src/host/outbox.js';
import { outboxMigrations } from '../../src/host/outbox-sql.js';
import type { HostStats } from '../../src/host/stats.js';
import { Totals } from '../../src/host/totals.js';
import { CLI_MAIN } from '../support/cli.js';
import { hostTargets } from '../support/host-app.js';
import { dropSchema, freshSchema, POSTGRES_URL } from '../support/postgres.js';
import { SELECTED_STORES } from '../support/store-filter.js';
import { until } from '../support/wait.js';

const run = promisify(execFile);
const CLI = [CLI_MAIN];

function appDir(): string {
  const dir = mkdtempSync(join(tmpdir(), 'oncely-totals-'));
  const files: Record<string, string> = {
    'package.json': '{ "type": "module" }\n',
    'oncely.config.ts': 'export default {};\n',
    'handlers/things/make.ts': `export async function handle(input: { id: string }) { return { id: input.id }; }\n`,
  };
  for (const [name, text] of Object.entries(files)) {
    mkdirSync(join(dir, name, '..'), { recursive: true });
    writeFileSync(join(dir, name), text);
  }
  return dir;
}

/** An `oncely serve` child process and its base URL. */
async function serve(dir: string, db: string): Promise<{ child: ChildProcess; base: string }> {
  const child = spawn(process.execPath, [...CLI, 'serve', dir, '--db', db, '--port', '0']);
  let stdout = '';
  let stderr = '';
  child.stdout?.on('data', (c) => {
    stdout += c;
  });
  child.stderr?.on('data', (c) => {
    stderr += c;
  });
  await until(
    'the serve banner',
    () => ({ stdout, stderr }),
    (out) => /stop with Ctrl-C/.test(out.stdout),
    { timeoutMs: 30_000, intervalMs: 100 },
  );
  const base = stdout.match(/on (http:\/\/localhost:\d+)/)?.[1];
  if (!base) throw new Error(`oncely serve did not start: ${stdout} ${stderr}`);
  return { child, base };
}

const stop = (child: ChildProcess) =>
  new Promise<number | null>((resolve) => {
    child.once('exit', (code) => resolve(code));
    child.kill('SIGTERM');
  });

const invoke = async (base: string, key: string, id: string) =>
  (
    await fetch(`${base}/v1/invoke/things.make`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'idempotency-key': key },
      body: JSON.stringify({ id }),
    })
  ).status;

const statsOf = async (base: string): Promise<HostStats> =>
  ((await (await fetch(`${base}/v1/stats`)).json()) as { data: HostStats }).data;

const ACTION = 'POST things.make';

if (SELECTED_STORES.has('postgres'))
  describe('totals of two oncely serve processes on one PostgreSQL', () => {
    const schema = freshSchema();
    const db = `${POSTGRES_URL}?schema=${schema}`;
    const children: ChildProcess[] = [];
    afterAll(async () => {
      for (const child of children) if (child.exitCode === null) await stop(child);
      await dropSchema(schema);
    });

    it('answers the same totals from either process, after both stop, and in oncely stats', async () => {
      const dir = appDir();
      const a = await serve(dir, db);
      children.push(a.child);
      const b = await serve(dir, db);
      children.push(b.child);
      // k1 runs on A and replays on B; k2 runs on B, is replayed on A and reused on A.
      expect(await invoke(a.base, 'k1', 'one')).toBe(200);
      expect(await invoke(b.base, 'k1', 'one')).toBe(200);
      expect(await invoke(b.base, 'k2', 'two')).toBe(200);
      expect(await invoke(a.base, 'k2', 'two')).toBe(200);
      expect(await invoke(a.base, 'k2', 'other')).toBe(422);
      // Each answer flushes its own process first: after one round both processes' counts are in.
      await statsOf(a.base);
      await statsOf(b.base);
      const fromA = await statsOf(a.base);
      const fromB = await statsOf(b.base);
      expect(fromB).toEqual(fromA);
      expect(fromA.totals.oncely_calls_total).toEqual(
        ['executed', 'key_reused', 'replayed'].map((outcome) => ({
          labels: { surface: 'handler', action: ACTION, outcome },
          value: { executed: 2, key_reused: 1, replayed: 2 }[outcome],
        })),
      );
      expect(fromA.rateTotals).toMatchObject({ calls: 5, keyHits: 3, duplicates: 2, duplicatesIntercepted: 2 });
      expect(fromA.rates.keyHit.value).toBe(3 / 5);
      expect(fromA.rates.duplicateInterception).toEqual({ value: 1, target: 0.999 });

      // A count of A's after its last answer is flushed at its stop.
      expect(await invoke(a.base, 'k1', 'one')).toBe(200);
      expect(await stop(a.child)).toBe(0);
      expect(await stop(b.child)).toBe(0);
      const c = await serve(dir, db);
      children.push(c.child);
      const afterRestart = await statsOf(c.base);
      expect(afterRestart.rateTotals).toEqual({
        ...fromA.rateTotals,
        calls: 6,
        keyHits: 4,
        duplicates: 3,
        duplicatesIntercepted: 3,
      });
      expect(await stop(c.child)).toBe(0);

      const { stdout } = await run(process.execPath, [...CLI, 'stats', '--db', db, '--json']);
      expect(JSON.parse(stdout)).toEqual(JSON.parse(JSON.stringify(afterRestart)));
      const text = (await run(process.execPath, [...CLI, 'stats', '--db', db])).stdout;
      expect(text).toContain('duplicate interception   100%      3 / 3             >= 99.90%');
      expect(text).toContain('key hit                  66.67%    4 / 6             -');
      expect(text).toContain('compensation success     n/a       0 / 0             >= 100%');
      expect(text).toContain(`oncely_calls_total{surface="handler",action="${ACTION}",outcome="replayed"} 3`);
    }, 120_000);
  });

describe('oncely stats', () => {
  it('refuses a database path that does not exist, and one without totals', async () => {
    const missing = join(mkdtempSync(join(tmpdir(), 'oncely-stats-')), 'nope.db');
    await expect(run(process.execPath, [...CLI, 'stats', '--db', missing])).rejects.toMatchObject({
      stderr: expect.stringContaining(`oncely: no database at ${missing}`),
    });
    const empty = join(mkdtempSync(join(tmpdir(), 'oncely-stats-')), 'empty.db');
    await (await openDb(empty)).close();
    await expect(run(process.execPath, [...CLI, 'stats', '--db', empty])).rejects.toMatchObject({
      stderr: expect.stringContaining('no oncely totals in'),
    });
  });
});

for (const { name, target, cleanup } of hostTargets())
  describe(`totals on ${name}`, () => {
    afterAll(cleanup);
    const opened: { close(): Promise<void> }[] = [];
    afterEach(async () => {
      for (const db of opened.splice(0)) await db.close();
    });

    it('moves the event counters of a database made before the totals into them', async () => {
      const db = await openDb(target());
      opened.push(db);
      // The events tables as version 3 left them, with counts in their sharded counter rows.
      await migrate(db, { component: 'events', steps: eventMigrations.steps.slice(0, 3) });
      await db.run(
        `INSERT INTO oncely_event_counters (outcome, shard, count) VALUES ('accepted', 0, 5), ('accepted', 3, 2), ('stale', 1, 1)`,
      );
      const queue = new EventQueue(db, { consumerFor: () => undefined });
      await queue.migrate();
      expect(await queue.stats()).toMatchObject({ accepted: 7, stale: 1, applied: 0 });
      const totals = new Totals(db, new Metrics());
      expect(await totals.read()).toEqual({
        oncely_events_total: [
          { labels: { source: '', type: '', outcome: 'accepted' }, value: 7 },
          { labels: { source: '', type: '', outcome: 'stale' }, value: 1 },
        ],
      });
      // New counts go on from there, with their source and type.
      expect(await queue.intake('shop', 'e1', 'order.paid', {})).toBe('accepted');
      expect((await queue.stats()).accepted).toBe(8);
      expect(
        await db.all("SELECT 1 FROM oncely_component_migrations WHERE component = 'events' AND version = 4"),
      ).toHaveLength(1);
    });

    it('counts outbox deliveries and retries by topic in the transaction that settles them', async () => {
      const db = await openDb(target());
      opened.push(db);
      await migrate(db, outboxMigrations);
      await db.transaction((tx) => enqueue(tx, `m-${name}`, 'sms.send', { to: 'x' }));
      const metrics = new Metrics();
      let failures = 2;
      const relay = new OutboxRelay(db, {
        target: {
          deliver: async () => {
            if (failures-- > 0) throw new Error('the gateway is down');
          },
        },
        backoff: 1,
        maxBackoff: 1,
        totals: new Totals(db, metrics),
      });
      await until(
        'the message delivered after two failures',
        async () => {
          await relay.deliverDue();
          return metrics.value('oncely_outbox_total', ['sms.send', 'delivered']);
        },
        (delivered) => delivered > 0,
      );
      expect([
        metrics.value('oncely_outbox_total', ['sms.send', 'retried']),
        metrics.value('oncely_outbox_total', ['sms.send', 'delivered']),
      ]).toEqual([2, 1]);
      const written = await db.all<{ labels: string; value: number | string }>(
        "SELECT labels, SUM(value) AS value FROM oncely_totals WHERE metric = 'oncely_outbox_total' AND labels LIKE '[\"sms.send\"%' GROUP BY labels ORDER BY labels",
      );
      expect(written.map((r) => [r.labels, Number(r.value)])).toEqual([
        ['["sms.send","delivered"]', 1],
        ['["sms.send","retried"]', 2],
      ]);
    });

    it('flushes counts without a transaction once: what a transaction wrote is not written again', async () => {
      const db = await openDb(target());
      opened.push(db);
      await new EventQueue(db, { consumerFor: () => undefined }).migrate();
      const metrics = new Metrics();
      const totals = new Totals(db, metrics);
      await totals.transaction(async (_tx, { count }) => count('oncely_outbox_total', ['t', 'delivered'], 2));
      metrics.add('oncely_calls_total', ['engine', 'pay', 'replayed'], 3);
      await totals.flush();
      await totals.flush();
      metrics.add('oncely_calls_total', ['engine', 'pay', 'replayed']);
      await totals.stop();
      expect(metrics.value('oncely_outbox_total', ['t', 'delivered'])).toBe(2);
      // (On PostgreSQL the schema is shared with the tests before: only these series are this test's.)
      const read = await totals.read();
      const oncely_calls_total = read.oncely_calls_total;
      const oncely_outbox_total = read.oncely_outbox_total?.filter((t) => t.labels.topic === 't');
      expect({ oncely_calls_total, oncely_outbox_total }).toEqual({
        oncely_calls_total: [{ labels: { surface: 'engine', action: 'pay', outcome: 'replayed' }, value: 4 }],
        oncely_outbox_total: [{ labels: { topic: 't', outcome: 'delivered' }, value: 2 }],
      });
      // A rolled-back transaction counts nowhere.
      await expect(
        totals.transaction(async (_tx, { count }) => {
          await count('oncely_outbox_total', ['t', 'retried']);
          throw new Error('rolled back');
        }),
      ).rejects.toThrow('rolled back');
      expect(metrics.value('oncely_outbox_total', ['t', 'retried'])).toBe(0);
      expect((await totals.read()).oncely_outbox_total?.filter((t) => t.labels.topic === 't')).toHaveLength(1);
    });
  });

if (SELECTED_STORES.has('postgres'))
  describe('totals on PostgreSQL under concurrent transactions', () => {
    it('never deadlocks transactions that count the same series in opposite orders, and compaction keeps every count', async () => {
      const schema = freshSchema();
      const db = await openDb(`${POSTGRES_URL}?schema=${schema}`, { poolSize: 8 });
      try {
        await new EventQueue(db, { consumerFor: () => undefined }).migrate();
        const metrics = new Metrics();
        const totals = new Totals(db, metrics);
        const a = ['t', 'delivered'] as const;
        const b = ['t', 'retried'] as const;
        // Each transaction holds its first count's row while the other takes its own first: with
        // shared counter rows, opposite orders deadlock (40P01) and one of them fails.
        const tx = (first: readonly string[], second: readonly string[]) =>
          totals.transaction(async (_tx, { count }) => {
            await count('oncely_outbox_total', first);
            // sleep: holds the first count's row while the other transaction takes its own.
            await new Promise((r) => setTimeout(r, 20));
            await count('oncely_outbox_total', second);
          });
        const runs = Array.from({ length: 40 }, (_, i) => (i % 2 === 0 ? tx(a, b) : tx(b, a)));
        const settled = await Promise.allSettled(runs);
        expect(settled.filter((s) => s.status === 'rejected')).toEqual([]);
        const rows = async () => Number((await db.all<{ n: string }>('SELECT COUNT(*) AS n FROM oncely_totals'))[0]?.n);
        expect(await rows()).toBe(80);
        await totals.flush();
        // Folded into one row per series, the sums unchanged.
        expect(await rows()).toBe(2);
        expect((await totals.read()).oncely_outbox_total).toEqual([
          { labels: { topic: 't', outcome: 'delivered' }, value: 40 },
          { labels: { topic: 't', outcome: 'retried' }, value: 40 },
        ]);
      } finally {
        await db.close();
        await dropSchema(schema);
      }
    });
  });
