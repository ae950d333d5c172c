import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openPostgres } from '../../src/db/postgres.js';
import { openSqlite } from '../../src/db/sqlite.js';
import { type Db, STATEMENT_CACHE_MAX, type StatementCache } from '../../src/db/types.js';
import { createDataStore } from '../../src/host/data-store.js';
import { op } from '../../src/host/index.js';
import { readSchema } from '../../src/host/schema.js';
import { IN_LIST_MAX } from '../../src/host/where.js';
import { dropSchema, freshSchema, POSTGRES_URL } from '../support/postgres.js';

const dir = mkdtempSync(join(tmpdir(), 'oncely-statements-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

function describeCache(name: string, open: () => Promise<{ db: Db & StatementCache; close(): Promise<void> }>) {
  describe(`statement cache on ${name}`, () => {
    let backend: { db: Db & StatementCache; close(): Promise<void> };
    beforeAll(async () => {
      backend = await open();
      await backend.db.exec('CREATE TABLE items (id integer PRIMARY KEY, name text NOT NULL)');
      await backend.db.run(
        `INSERT INTO items (id, name) SELECT n, 'item ' || n FROM (${name === 'SQLite' ? 'WITH RECURSIVE s(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM s WHERE n < 1000) SELECT n FROM s' : 'SELECT generate_series(1, 1000) AS n'}) AS s`,
      );
    });
    afterAll(() => backend?.close());

    it('defect 11.4: statement caches are bounded, and in lists of every length share one statement', async () => {
      const { db } = backend;
      const store = createDataStore(db, await readSchema(db, name === 'SQLite' ? {} : { schema: db.schema }));
      const before = db.cachedStatements();
      for (let length = 1; length <= IN_LIST_MAX; length += 7) {
        const ids = Array.from({ length }, (_, i) => i + 1);
        const found = await store.find('items', { id: op.in(ids) });
        expect(found.ok && found.data.length).toBe(length);
      }
      // 143 lengths, one statement text for all of them.
      expect(db.cachedStatements() - before).toBe(1);
      // Any number of distinct texts keeps the cache at its bound.
      for (let i = 0; i < STATEMENT_CACHE_MAX * 2; i++) {
        expect(await db.all(`SELECT ${i} AS n`)).toEqual([{ n: i }]);
      }
      expect(db.cachedStatements()).toBe(STATEMENT_CACHE_MAX);
      expect(await db.all('SELECT name FROM items WHERE id = ?', [7])).toEqual([{ name: 'item 7' }]);
    });

    it('defect 11.4: an in list longer than 1,000 values is LIST_TOO_LONG, past the driver limit too', async () => {
      const { db } = backend;
      const store = createDataStore(db, await readSchema(db, name === 'SQLite' ? {} : { schema: db.schema }));
      for (const length of [IN_LIST_MAX + 1, 70_000]) {
        const ids = Array.from({ length }, (_, i) => i);
        expect(await store.find('items', { id: op.in(ids) })).toMatchObject({
          ok: false,
          error: { code: 'LIST_TOO_LONG' },
        });
        expect(await store.update('items', { id: op.in(ids) }, { name: 'x' })).toMatchObject({
          ok: false,
          error: { code: 'LIST_TOO_LONG' },
        });
      }
      const all = await store.find('items', { id: op.in(Array.from({ length: IN_LIST_MAX }, (_, i) => i + 1)) });
      expect(all.ok && all.data.length).toBe(IN_LIST_MAX);
    });
  });
}

describeCache('SQLite', async () => {
  const db = await openSqlite(join(dir, 'app.db'));
  return { db, close: () => db.close() };
});

describeCache('PostgreSQL', async () => {
  const schema = freshSchema();
  const db = await openPostgres(`${POSTGRES_URL}?schema=${schema}`);
  return {
    db,
    close: async () => {
      await db.close();
      await dropSchema(schema);
    },
  };
});
