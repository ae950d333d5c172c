/**
 * Residual-duplicate scans on SQLite and PostgreSQL: effect rows planted beside the keys (inserted
 * directly, as a handler that writes twice would) are found with their counts and times, counted
 * once as duplicates not intercepted (the interception rate falls from 1 to what they make it),
 * never twice by a second scan or by two processes scanning at once; a bad table or column fails
 * the start with its code; the schedule scans on its own; findings page with a cursor.
 */
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { OncelyError } from '../../src/core/errors.js';
import { openDb } from '../../src/db/index.js';
import type { Db } from '../../src/db/types.js';
import type { HostConfig } from '../../src/host/config.js';
import { createHost } from '../../src/host/host.js';
import { recordStoreFor } from '../../src/host/records.js';
import { readSchema } from '../../src/host/schema.js';
import { DuplicateScanner, listFindings, resolveEffects } from '../../src/ops/duplicates.js';
import { type RunningHost, sleep, startHost, type TestApp } from '../support/host-app.js';
import { dropSchema, freshSchema, POSTGRES_URL } from '../support/postgres.js';
import { startWorker } from '../support/spawn.js';
import { selectStores } from '../support/store-filter.js';
import { until } from '../support/wait.js';

const CHILD = new URL('./duplicates-child.ts', import.meta.url).pathname;

const SCHEMA_SQL = `
CREATE TABLE ledger (id TEXT PRIMARY KEY, order_id TEXT NOT NULL, kind TEXT NOT NULL, amount INTEGER NOT NULL, created_at BIGINT NOT NULL);
CREATE TABLE notes (id TEXT PRIMARY KEY, order_id TEXT, body TEXT);
`;
const EFFECTS = [
  { table: 'ledger', by: ['orderId', 'kind'] },
  { table: 'notes', by: ['orderId'] },
];

const schemas: string[] = [];
afterAll(async () => {
  for (const schema of schemas) await dropSchema(schema);
});

/** A fresh database of each dialect per test (those ONCELY_STORES selects): a new SQLite file, a new PostgreSQL schema. */
const dialects = selectStores([
  { name: 'sqlite', fresh: () => join(mkdtempSync(join(tmpdir(), 'oncely-dup-')), 'app.db') },
  {
    name: 'postgres',
    fresh: () => {
      const schema = freshSchema();
      schemas.push(schema);
      return `${POSTGRES_URL}?schema=${schema}`;
    },
  },
] as const);

function ledgerApp(config: HostConfig = {}): TestApp {
  return {
    schemaSql: SCHEMA_SQL,
    config: { effects: EFFECTS, duplicateScan: false, ...config },
    handlers: {
      'ledger.charge': {
        handle: async (input, ctx) => {
          const { id, orderId } = input as { id: string; orderId: string };
          const row = { id, orderId, kind: 'charge', amount: 100 };
          const written = await ctx.store.createIfAbsent('ledger', row, ['id']);
          if (!written.ok) throw new Error(written.error.message);
          return { id };
        },
      },
    },
  };
}

/** Rows written straight into the table, past every key, as the bugs the scan exists for leave them. */
async function plant(db: Db, rows: [string, string, string, number][]): Promise<void> {
  for (const [id, orderId, kind, createdAt] of rows)
    await db.run('INSERT INTO ledger (id, order_id, kind, amount, created_at) VALUES (?, ?, ?, 1, ?)', [
      id,
      orderId,
      kind,
      createdAt,
    ]);
}

const notIntercepted = async (h: RunningHost) => (await h.host.stats()).rateTotals;

for (const dialect of dialects)
  describe(`duplicate scan on ${dialect.name}`, () => {
    it('finds planted duplicates with their counts and times, counts each extra row once, and moves the rate', async () => {
      const target = dialect.fresh();
      const h = await startHost(target, ledgerApp());
      const db = await openDb(target, { poolSize: 2 });
      try {
        const before = Date.now();
        // One intent called twice with its key: a duplicate intercepted, the rate 1.
        for (let i = 0; i < 2; i++)
          expect(
            (await h.invoke('ledger.charge', { id: 'L-1', orderId: 'O-1' }, { 'idempotency-key': 'O-1-charge' }))
              .status,
          ).toBe(200);
        expect(await notIntercepted(h)).toMatchObject({ duplicates: 1, duplicatesIntercepted: 1 });
        expect((await h.host.stats()).rates.duplicateInterception.value).toBe(1);

        // O-1/charge: the handler's row and two planted (3 rows, 2 extra); O-2/refund: 2 rows (1 extra); O-3: one row.
        await plant(db, [
          ['L-2', 'O-1', 'charge', 1_000],
          ['L-3', 'O-1', 'charge', 2_000],
          ['L-4', 'O-2', 'refund', 5_000],
          ['L-5', 'O-2', 'refund', 7_000],
          ['L-6', 'O-3', 'charge', 9_000],
        ]);
        // notes has no created_at: its finding has no row times. NULL keys are never one intent.
        for (const [id, orderId] of [
          ['N-1', 'O-1'],
          ['N-2', 'O-1'],
          ['N-3', null],
          ['N-4', null],
        ])
          await db.run('INSERT INTO notes (id, order_id, body) VALUES (?, ?, ?)', [id, orderId, 'x']);

        const first = await h.host.scanDuplicates();
        expect(first.counted).toBe(4);
        expect(first.tables).toEqual([
          { table: 'ledger', groups: 2, truncated: false },
          { table: 'notes', groups: 1, truncated: false },
        ]);
        const byKey = Object.fromEntries(first.findings.map((f) => [`${f.table} ${f.businessKey}`, f]));
        expect(Object.keys(byKey).sort()).toEqual([
          'ledger {"kind":"charge","orderId":"O-1"}',
          'ledger {"kind":"refund","orderId":"O-2"}',
          'notes {"orderId":"O-1"}',
        ]);
        const o1 = byKey['ledger {"kind":"charge","orderId":"O-1"}'];
        expect(o1).toMatchObject({ count: 3, counted: 2, rowsFirstAt: 1_000, firstSeen: first.at, lastSeen: first.at });
        expect(o1?.rowsLastAt).toBeGreaterThanOrEqual(before);
        expect(byKey['ledger {"kind":"refund","orderId":"O-2"}']).toMatchObject({
          count: 2,
          counted: 1,
          rowsFirstAt: 5_000,
          rowsLastAt: 7_000,
        });
        expect(byKey['notes {"orderId":"O-1"}']).toMatchObject({
          count: 2,
          counted: 1,
          rowsFirstAt: null,
          rowsLastAt: null,
        });

        // 1 intercepted of 5 duplicates.
        let stats = await h.host.stats();
        expect(stats.rateTotals).toMatchObject({ duplicates: 5, duplicatesIntercepted: 1 });
        expect(stats.rates.duplicateInterception.value).toBeCloseTo(0.2, 10);
        const scanSeries = stats.totals.oncely_duplicates_total?.filter((s) => s.labels.surface === 'scan');
        expect(scanSeries).toEqual(
          expect.arrayContaining([
            { labels: { surface: 'scan', action: 'ledger', intercepted: 'false' }, value: 3 },
            { labels: { surface: 'scan', action: 'notes', intercepted: 'false' }, value: 1 },
          ]),
        );
        expect(h.host.metrics.value('oncely_duplicates_total', ['scan', 'ledger', 'false'])).toBe(3);

        // A second scan sees the same groups: nothing new to count, last seen moves, first seen stays.
        // sleep: the clock moves past the first scan's time, so its last seen can be told apart
        await sleep(5);
        const second = await h.host.scanDuplicates();
        expect(second.counted).toBe(0);
        expect(second.findings.map((f) => f.firstSeen)).toEqual(first.findings.map(() => first.at));
        expect(second.findings.every((f) => f.lastSeen === second.at && second.at > first.at)).toBe(true);
        expect((await notIntercepted(h)).duplicates).toBe(5);

        // One more row of O-2/refund: only it counts.
        await plant(db, [['L-7', 'O-2', 'refund', 8_000]]);
        const third = await h.host.scanDuplicates();
        expect(third.counted).toBe(1);
        expect(third.findings.find((f) => f.businessKey.includes('O-2'))).toMatchObject({
          count: 3,
          counted: 2,
          rowsLastAt: 8_000,
        });
        stats = await h.host.stats();
        expect(stats.rateTotals).toMatchObject({ duplicates: 6, duplicatesIntercepted: 1 });
        expect(stats.rates.duplicateInterception.value).toBeCloseTo(1 / 6, 10);

        // A fixed group (its extra rows deleted) keeps its finding and never counts down.
        await db.run("DELETE FROM ledger WHERE id IN ('L-5', 'L-7')");
        expect((await h.host.scanDuplicates()).counted).toBe(0);
        expect((await listFindings(db, { limit: 10, table: 'ledger' })).findings).toHaveLength(2);
      } finally {
        await db.close();
        await h.stop();
      }
    });

    it('lists findings a page at a time, and refuses a bad cursor or limit', async () => {
      const target = dialect.fresh();
      const h = await startHost(target, ledgerApp());
      const db = await openDb(target, { poolSize: 2 });
      try {
        await plant(db, [
          ['a1', 'A', 'charge', 1],
          ['a2', 'A', 'charge', 2],
          ['b1', 'B', 'charge', 3],
          ['b2', 'B', 'charge', 4],
          ['c1', 'C', 'charge', 5],
          ['c2', 'C', 'charge', 6],
        ]);
        await h.host.scanDuplicates();
        const one = await listFindings(db, { limit: 2 });
        expect(one.findings.map((f) => f.businessKey)).toEqual([
          '{"kind":"charge","orderId":"A"}',
          '{"kind":"charge","orderId":"B"}',
        ]);
        expect(one.cursor).not.toBeNull();
        const two = await listFindings(db, { limit: 2, cursor: one.cursor ?? '' });
        expect(two.findings.map((f) => f.businessKey)).toEqual(['{"kind":"charge","orderId":"C"}']);
        expect(two.cursor).toBeNull();
        expect((await listFindings(db, { limit: 5, table: 'notes' })).findings).toEqual([]);
        await expect(listFindings(db, { limit: 2, cursor: 'not-a-cursor' })).rejects.toMatchObject({
          code: 'CURSOR_INVALID',
        });
        await expect(listFindings(db, { limit: 0 })).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
      } finally {
        await db.close();
        await h.stop();
      }
    });

    it('reads a table in bounded pages of groups, going on from the last page in the next scan', async () => {
      const target = dialect.fresh();
      const h = await startHost(target, ledgerApp());
      const db = await openDb(target, { poolSize: 2 });
      try {
        await plant(db, [
          ['a1', 'A', 'charge', 1],
          ['a2', 'A', 'charge', 2],
          ['b1', 'B', 'charge', 3],
          ['b2', 'B', 'charge', 4],
          ['b3', 'B', 'charge', 5],
        ]);
        const schema = await readSchema(db, db.schema ? { schema: db.schema } : undefined);
        const targets = resolveEffects(schema, [{ table: 'ledger', by: ['orderId', 'kind'] }]);
        const scanner = new DuplicateScanner(db, h.host.totals, () => targets, { groupsPerTable: 1 });
        const seen = [];
        for (let i = 0; i < 3; i++) {
          const scan = await scanner.scan();
          seen.push([scan.findings.map((f) => f.businessKey).join(), scan.tables[0]?.truncated, scan.counted]);
        }
        expect(seen).toEqual([
          ['{"kind":"charge","orderId":"A"}', true, 1],
          ['{"kind":"charge","orderId":"B"}', true, 2],
          // Past the last group: back to the first in the same scan, not a scan that reads nothing.
          ['{"kind":"charge","orderId":"A"}', true, 0],
        ]);
      } finally {
        await db.close();
        await h.stop();
      }
    });

    it('counts each extra row once when two processes scan at once', async () => {
      const target = dialect.fresh();
      const h = await startHost(target, ledgerApp());
      const db = await openDb(target, { poolSize: 2 });
      try {
        // 3,000 intents with 2 rows each: 3,000 extra rows, read 1,000 groups a scan in 3 scans by each process.
        for (let from = 0; from < 3_000; from += 250) {
          const values: unknown[] = [];
          for (let g = from; g < from + 250; g++) values.push(`g${g}-a`, `O-${g}`, `g${g}-b`, `O-${g}`);
          await db.run(
            `INSERT INTO ledger (id, order_id, kind, amount, created_at) VALUES ${Array(500).fill("(?, ?, 'charge', 1, 0)").join(', ')}`,
            values,
          );
        }
        const children = [0, 1].map(() =>
          startWorker({ target, schemaSql: SCHEMA_SQL, effects: [EFFECTS[0]], passes: 3 }, CHILD),
        );
        await Promise.all(children.map((c) => c.waitFor('ready')));
        for (const c of children) c.child.stdin.write('go\n');
        const results = (await Promise.all(children.map((c) => c.waitFor('{')))).map(
          (line) => JSON.parse(line) as { counted: number; groups: number },
        );
        expect(results.map((r) => r.groups)).toEqual([3_000, 3_000]);
        expect(results.reduce((sum, r) => sum + r.counted, 0)).toBe(3_000);
        const stats = await h.host.stats();
        expect(stats.rateTotals).toMatchObject({ duplicates: 3_000, duplicatesIntercepted: 0 });
        const counted = await db.all<{ n: number | string }>('SELECT SUM(counted) AS n FROM oncely_duplicate_findings');
        expect(Number(counted[0]?.n)).toBe(3_000);
        // Reported for the run's log: how the work split between the two.
        console.log(`two scanners counted ${results.map((r) => r.counted).join(' + ')} of 3,000 extra rows`);
      } finally {
        await db.close();
        await h.stop();
      }
      // Two processes storing the same 3,000 findings at once: 40 to 50 s on PostgreSQL on a loaded 2-core machine.
    }, 120_000);

    it('fails the start on an unknown table or column, with its code', async () => {
      const cases: [HostConfig['effects'], string][] = [
        [[{ table: 'nope', by: ['orderId'] }], 'TABLE_UNKNOWN'],
        [[{ table: 'ledger', by: ['orderId', 'nope'] }], 'COLUMN_UNKNOWN'],
        [[{ table: 'ledger', by: ['orderId"; DROP TABLE ledger; --'] }], 'COLUMN_UNKNOWN'],
        [[{ table: 'ledger', by: [] }], 'CONFIG_INVALID'],
      ];
      for (const [effects, code] of cases) {
        const target = dialect.fresh();
        const db = await openDb(target, { poolSize: 2 });
        const host = await createHost(
          {
            dir: tmpdir(),
            config: { effects, duplicateScan: false },
            schemaSql: SCHEMA_SQL,
            handlers: new Map(),
            consumers: new Map(),
            flows: [],
          },
          db,
          recordStoreFor(db),
        );
        const started = host.start(0).then(
          () => undefined,
          (error: unknown) => error,
        );
        const error = await started;
        await host.stop();
        expect(error).toBeInstanceOf(OncelyError);
        expect((error as OncelyError).code).toBe(code);
        await expect(host.scanDuplicates()).rejects.toMatchObject({ code: 'NOT_MIGRATED' });
      }
    });

    it('refuses a duplicateScan.every that is no duration when the host is built', async () => {
      const db = await openDb(dialect.fresh(), { poolSize: 1 });
      try {
        const app = {
          dir: tmpdir(),
          config: { effects: EFFECTS, duplicateScan: { every: 'daily' as never } },
          schemaSql: SCHEMA_SQL,
          handlers: new Map(),
          consumers: new Map(),
          flows: [],
        };
        await expect(createHost(app, db, recordStoreFor(db))).rejects.toMatchObject({
          code: 'INVALID_ARGUMENT',
          message: expect.stringContaining('duplicateScan.every'),
        });
      } finally {
        await db.close();
      }
    });

    it('reads row times from a TIMESTAMPTZ created_at as well as a BIGINT one', async () => {
      const stamp = dialect.name === 'postgres' ? 'TIMESTAMPTZ' : 'TIMESTAMP';
      const target = dialect.fresh();
      const h = await startHost(target, {
        schemaSql: `CREATE TABLE payouts (id TEXT PRIMARY KEY, payout_ref TEXT NOT NULL, created_at ${stamp} NOT NULL);`,
        config: { effects: [{ table: 'payouts', by: ['payoutRef'] }], duplicateScan: false },
      });
      const db = await openDb(target, { poolSize: 1 });
      try {
        const at = ['2026-03-01T10:00:00.000Z', '2026-03-02T11:30:00.000Z'];
        for (const [i, iso] of at.entries())
          await db.run('INSERT INTO payouts (id, payout_ref, created_at) VALUES (?, ?, ?)', [`p${i}`, 'PO-1', iso]);
        const scan = await h.host.scanDuplicates();
        expect(scan.findings).toMatchObject([
          {
            table: 'payouts',
            businessKey: '{"payoutRef":"PO-1"}',
            rowsFirstAt: Date.parse(at[0] ?? ''),
            rowsLastAt: Date.parse(at[1] ?? ''),
          },
        ]);
      } finally {
        await db.close();
        await h.stop();
      }
    });

    it('scans on its schedule while the host runs, and not at all with duplicateScan: false', async () => {
      const target = dialect.fresh();
      const h = await startHost(target, ledgerApp({ duplicateScan: { every: '100ms' } }));
      const db = await openDb(target, { poolSize: 2 });
      try {
        await plant(db, [
          ['a1', 'A', 'charge', 1],
          ['a2', 'A', 'charge', 2],
        ]);
        const found = await until(
          'the scheduled scan to store a finding',
          async () => (await listFindings(db, { limit: 10 })).findings.length,
          (n) => n > 0,
        );
        expect(found).toBe(1);
        expect(h.host.metrics.value('oncely_duplicates_total', ['scan', 'ledger', 'false'])).toBe(1);
      } finally {
        await db.close();
        await h.stop();
      }
      const off = dialect.fresh();
      const quiet = await startHost(off, ledgerApp());
      const offDb = await openDb(off, { poolSize: 2 });
      try {
        await plant(offDb, [
          ['a1', 'A', 'charge', 1],
          ['a2', 'A', 'charge', 2],
        ]);
        // sleep: four periods of the schedule above pass, in which no scan may run
        await sleep(400);
        expect((await listFindings(offDb, { limit: 10 })).findings).toEqual([]);
      } finally {
        await offDb.close();
        await quiet.stop();
      }
    });
  });
