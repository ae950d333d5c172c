import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openPostgres } from '../../src/db/postgres.js';
import { openSqlite } from '../../src/db/sqlite.js';
import type { Db } from '../../src/db/types.js';
import { createDataStore } from '../../src/host/data-store.js';
import { op } from '../../src/host/index.js';
import { type AppSchema, readSchema } from '../../src/host/schema.js';
import type { DataStore } from '../../src/host/types.js';
import { dropSchema, freshSchema, POSTGRES_URL } from '../support/postgres.js';

const dir = mkdtempSync(join(tmpdir(), 'oncely-where-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const ddl = (p: string) => `
  CREATE TABLE ${p}coupons (code text PRIMARY KEY, secret text NOT NULL, redeemed integer NOT NULL DEFAULT 0,
    version integer, meta json);
  INSERT INTO ${p}coupons (code, secret) VALUES ('WELCOME', 's-welcome'), ('VIP-7f3a', 's-vip');
`;

const refused = { ok: false, error: { code: 'VALUE_INVALID' } };

/** Bodies an attacker sends where a handler expects a coupon code: JSON, so plain objects and arrays. */
const attacks = ['{"ne":"x"}', '{"in":["WELCOME","VIP-7f3a"]}', '{"gte":""}', '{"isNull":false}', '["WELCOME"]', '{}'];

function describeInjection(name: string, open: () => Promise<{ db: Db; app: AppSchema; close(): Promise<void> }>) {
  describe(`where and values on ${name}`, () => {
    let backend: { db: Db; app: AppSchema; close(): Promise<void> };
    let store: DataStore;
    beforeAll(async () => {
      backend = await open();
      store = createDataStore(backend.db, backend.app);
    });
    afterAll(() => backend?.close());

    it('defect 11.2: a JSON object in a where is a value, never an operator', async () => {
      for (const body of attacks) {
        const code = JSON.parse(body) as unknown;
        // What a handler doing get/update by `input.code` would run.
        expect(await store.get('coupons', { code }), body).toMatchObject(refused);
        expect(await store.find('coupons', { code }), body).toMatchObject(refused);
        expect(await store.update('coupons', { code, redeemed: 0 }, { redeemed: 1 }), body).toMatchObject(refused);
      }
      expect(await backend.db.all('SELECT code FROM coupons WHERE redeemed = 1')).toEqual([]);
      // Operators exist only when code builds them.
      expect((await store.find('coupons', { code: op.ne('x') })).ok).toBe(true);
      const both = await store.find('coupons', { code: op.in(['WELCOME', 'VIP-7f3a']) });
      expect(both.ok && both.data.map((c) => c.code)).toEqual(['VIP-7f3a', 'WELCOME']);
      expect(await store.update('coupons', { code: 'WELCOME', redeemed: 0 }, { redeemed: 1 })).toEqual({
        ok: true,
        data: { affected: 1 },
      });
    });

    it('defect 11.2: an object or array written into a scalar column is refused, never stored as JSON text', async () => {
      for (const body of attacks) {
        const value = JSON.parse(body) as unknown;
        expect(await store.createIfAbsent('coupons', { code: value, secret: 's' }, ['code']), body).toMatchObject(
          refused,
        );
        expect(await store.createIfAbsent('coupons', { code: 'NEW', secret: value }, ['code']), body).toMatchObject(
          refused,
        );
        expect(await store.update('coupons', { code: 'WELCOME' }, { secret: value }), body).toMatchObject(refused);
        expect(await store.applyVersion('coupons', { code: 'WELCOME' }, 9, { secret: value }), body).toMatchObject(
          refused,
        );
      }
      // A JSON-looking increment is a value too: only op.increment changes a number relatively.
      expect(
        await store.update('coupons', { code: 'WELCOME' }, { redeemed: JSON.parse('{"increment":5}') }),
      ).toMatchObject(refused);
      expect(await store.update('coupons', { code: 'WELCOME' }, { redeemed: op.ne(1) })).toMatchObject(refused);
      expect(await store.createIfAbsent('coupons', { code: op.ne('x'), secret: 's' }, ['code'])).toMatchObject(refused);
      expect((await store.update('coupons', { code: 'WELCOME' }, { redeemed: op.increment(1) })).ok).toBe(true);
      // JSON columns keep taking objects and arrays as values.
      expect((await store.update('coupons', { code: 'WELCOME' }, { meta: { ne: 'x', list: [1] } })).ok).toBe(true);
      const row = await store.get('coupons', { code: 'WELCOME' });
      expect(row.ok && row.data).toMatchObject({ secret: 's-welcome', redeemed: 2, meta: { ne: 'x', list: [1] } });
      expect(await backend.db.all('SELECT code FROM coupons ORDER BY code')).toEqual([
        { code: 'VIP-7f3a' },
        { code: 'WELCOME' },
      ]);
    });

    it('defect 11.2: a where on a JSON column takes only null tests, not a value read as operators', async () => {
      expect(await store.find('coupons', { meta: { ne: 'x' } })).toMatchObject({
        ok: false,
        error: { code: 'WHERE_INVALID' },
      });
      const withMeta = await store.find('coupons', { meta: op.notNull() });
      expect(withMeta.ok && withMeta.data.map((c) => c.code)).toEqual(['WELCOME']);
    });
  });
}

describeInjection('SQLite', async () => {
  const db = await openSqlite(join(dir, 'app.db'));
  await db.exec(ddl(''));
  return { db, app: await readSchema(db), close: () => db.close() };
});

describeInjection('PostgreSQL', async () => {
  const schema = freshSchema();
  const db = await openPostgres(`${POSTGRES_URL}?schema=${schema}`);
  await db.exec(ddl(''));
  return {
    db,
    app: await readSchema(db, { schema }),
    close: async () => {
      await db.close();
      await dropSchema(schema);
    },
  };
});
