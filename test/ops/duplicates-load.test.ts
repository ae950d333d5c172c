/**
 * The duplicate scan on 100,000 effect rows with 500 duplicated intents (1,000 extra rows), on
 * SQLite and PostgreSQL: the first scan counts the 1,000, the next counts nothing, and the figures
 * the README quotes are printed beside the bare GROUP BY the scan is built on.
 */
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { openDb } from '../../src/db/index.js';
import { startHost } from '../support/host-app.js';
import { dropSchema, freshSchema, POSTGRES_URL } from '../support/postgres.js';
import { selectStores } from '../support/store-filter.js';

const ROWS = 100_000;
const schemas: string[] = [];
afterAll(async () => {
  for (const schema of schemas) await dropSchema(schema);
});

const dialects = selectStores([
  { name: 'sqlite', fresh: () => join(mkdtempSync(join(tmpdir(), 'oncely-dup-load-')), 'app.db') },
  {
    name: 'postgres',
    fresh: () => {
      const schema = freshSchema();
      schemas.push(schema);
      return `${POSTGRES_URL}?schema=${schema}`;
    },
  },
] as const);

for (const dialect of dialects)
  describe(`duplicate scan load on ${dialect.name}`, () => {
    it('scans 100,000 rows with 500 duplicated intents, counting their 1,000 extra rows once', async () => {
      const target = dialect.fresh();
      const h = await startHost(target, {
        schemaSql: `CREATE TABLE ledger (id TEXT PRIMARY KEY, order_id TEXT NOT NULL, kind TEXT NOT NULL, created_at BIGINT NOT NULL);
          CREATE INDEX ledger_intent ON ledger (order_id, kind);`,
        config: { effects: [{ table: 'ledger', by: ['orderId', 'kind'] }], duplicateScan: false },
      });
      const db = await openDb(target, { poolSize: 2 });
      try {
        await db.transaction(async (tx) => {
          for (let from = 0; from < ROWS; from += 1_000) {
            const values: unknown[] = [];
            // The first 1,500 rows are 500 intents of 3 rows each; the rest one row each.
            for (let i = from; i < from + 1_000; i++) values.push(`r${i}`, `O-${i < 1_500 ? Math.floor(i / 3) : i}`, i);
            await tx.run(
              `INSERT INTO ledger (id, order_id, kind, created_at) VALUES ${Array(1_000).fill("(?, ?, 'charge', ?)").join(', ')}`,
              values,
            );
          }
        });
        if (dialect.name === 'postgres') await db.run('ANALYZE ledger');
        const times: number[] = [];
        const counted: number[] = [];
        for (let pass = 0; pass < 3; pass++) {
          const started = performance.now();
          const scan = await h.host.scanDuplicates();
          times.push(Math.round(performance.now() - started));
          counted.push(scan.counted);
          expect(scan.findings).toHaveLength(500);
        }
        expect(counted).toEqual([1_000, 0, 0]);
        expect((await h.host.stats()).rateTotals).toMatchObject({ duplicates: 1_000, duplicatesIntercepted: 0 });
        const started = performance.now();
        await db.all(
          'SELECT order_id, kind, COUNT(*) AS n FROM ledger GROUP BY order_id, kind HAVING COUNT(*) > 1 LIMIT 1000',
        );
        const floor = Math.round(performance.now() - started);
        console.log(
          `${dialect.name}: ${ROWS} rows, 500 duplicated intents: scans ${times.join(', ')} ms (the first counts 1,000 extra rows); the bare GROUP BY ${floor} ms`,
        );
      } finally {
        await db.close();
        await h.stop();
      }
    }, 60_000);
  });
