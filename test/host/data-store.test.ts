import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openPostgres } from '../../src/db/postgres.js';
import { openSqlite } from '../../src/db/sqlite.js';
import type { Db } from '../../src/db/types.js';
import { createDataStore } from '../../src/host/data-store.js';
import { op } from '../../src/host/operators.js';
import { type AppSchema, camelCase, readSchema, snakeCase } from '../../src/host/schema.js';
import type { DataStore, Result } from '../../src/host/types.js';
import { dropSchema, freshSchema, POSTGRES_URL } from '../support/postgres.js';
import { type StoreName, selectStores } from '../support/store-filter.js';

const dir = mkdtempSync(join(tmpdir(), 'oncely-data-store-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const ddl = (p: string) => `
  CREATE TABLE ${p}orders (id text PRIMARY KEY, customer_id text NOT NULL, status text NOT NULL,
    amount_cents integer, version integer NOT NULL DEFAULT 0, created_at bigint, updated_at bigint);
  CREATE TABLE ${p}inventory (sku text PRIMARY KEY, quantity integer NOT NULL CHECK (quantity >= 0));
  CREATE TABLE ${p}sink (kind text, idempotency_key text, PRIMARY KEY (kind, idempotency_key));
  CREATE TABLE ${p}customers (id text PRIMARY KEY, email text NOT NULL UNIQUE, name text, tags text);
  CREATE TABLE ${p}order_lines (order_id text NOT NULL REFERENCES ${p}orders (id), line_no integer NOT NULL,
    sku text, PRIMARY KEY (order_id, line_no));
  CREATE TABLE ${p}events (id text PRIMARY KEY, payload json, happened_at timestamptz, flag boolean, day date,
    big bigint, created_at timestamptz, updated_at text);
  CREATE TABLE ${p}readings (id text PRIMARY KEY, value double precision, exact numeric);
  CREATE TABLE ${p}oncely_records (key text PRIMARY KEY);
`;

interface Backend {
  db: Db;
  app: AppSchema;
  close(): Promise<void>;
}

// sleep: holds a transaction open for a while, so the concurrent ones of a race overlap it.
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

function unwrap<T>(result: Result<T>): T {
  if (!result.ok) throw new Error(`${result.error.code}: ${result.error.message}`);
  return result.data;
}

function describeDataStore(name: string, open: () => Promise<Backend>) {
  describe(`data store on ${name}`, () => {
    let backend: Backend;
    let clock = 1_700_000_000_000;
    const now = () => clock;
    const inTx = <T>(fn: (store: DataStore) => Promise<T>) =>
      backend.db.transaction((tx) => fn(createDataStore(tx, backend.app, { now })));
    const outside = () => createDataStore(backend.db, backend.app, { now });

    beforeAll(async () => {
      backend = await open();
    });
    afterAll(() => backend?.close());

    it("reads the app's tables, columns and unique sets, leaving out oncely's own", () => {
      const { app } = backend;
      expect([...app.tables.keys()].sort()).toEqual([
        'customers',
        'events',
        'inventory',
        'order_lines',
        'orders',
        'readings',
        'sink',
      ]);
      const orders = app.tables.get('orders');
      expect([...(orders?.columns.keys() ?? [])]).toEqual([
        'id',
        'customer_id',
        'status',
        'amount_cents',
        'version',
        'created_at',
        'updated_at',
      ]);
      expect(orders?.columns.get('customer_id')).toMatchObject({ nullable: false, hasDefault: false, kind: 'text' });
      expect(orders?.columns.get('version')).toMatchObject({ nullable: false, hasDefault: true, kind: 'integer' });
      expect(orders?.columns.get('amount_cents')).toMatchObject({ nullable: true });
      expect(app.tables.get('sink')?.primaryKey).toEqual(['kind', 'idempotency_key']);
      expect(app.tables.get('customers')?.uniqueSets).toEqual(expect.arrayContaining([['id'], ['email']]));
      expect(app.tables.get('events')?.columns.get('happened_at')?.kind).toBe('timestamp');
    });

    it('createIfAbsent inserts once and answers later calls with the existing row (camelCase both ways)', async () => {
      clock = 1_700_000_000_000;
      const first = await inTx((s) =>
        s.createIfAbsent('orders', { id: 'O-1', customerId: 'C-1', status: 'new', amountCents: 1250 }, ['id']),
      );
      expect(unwrap(first)).toEqual({
        created: true,
        record: {
          id: 'O-1',
          customerId: 'C-1',
          status: 'new',
          amountCents: 1250,
          version: 0,
          createdAt: clock,
          updatedAt: clock,
        },
      });
      clock += 5_000;
      const again = await inTx((s) =>
        s.createIfAbsent('orders', { id: 'O-1', customer_id: 'C-2', status: 'other' }, ['id']),
      );
      expect(unwrap(again)).toEqual({ created: false, record: unwrap(first).record });
    });

    it('createIfAbsent takes a composite or secondary unique index, in any order, and camelCase table names', async () => {
      const store = outside();
      const a = unwrap(
        await store.createIfAbsent('sink', { kind: 'sms', idempotencyKey: 'E-1' }, ['idempotencyKey', 'kind']),
      );
      const b = unwrap(
        await store.createIfAbsent('sink', { kind: 'sms', idempotencyKey: 'E-1' }, ['kind', 'idempotency_key']),
      );
      const c = unwrap(
        await store.createIfAbsent('sink', { kind: 'ledger', idempotencyKey: 'E-1' }, ['kind', 'idempotencyKey']),
      );
      expect([a.created, b.created, c.created]).toEqual([true, false, true]);
      const byEmail = unwrap(
        await store.createIfAbsent('customers', { id: 'C-9', email: 'a@x.io', name: 'Ann' }, ['email']),
      );
      const sameEmail = unwrap(
        await store.createIfAbsent('customers', { id: 'C-10', email: 'a@x.io', name: 'Bob' }, ['email']),
      );
      expect(sameEmail).toEqual({ created: false, record: byEmail.record });
      unwrap(await store.createIfAbsent('orders', { id: 'O-L', customerId: 'C', status: 'new' }, ['id']));
      const line = unwrap(
        await store.createIfAbsent('orderLines', { orderId: 'O-L', lineNo: 1, sku: 'S' }, ['orderId', 'lineNo']),
      );
      expect(line).toEqual({ created: true, record: { orderId: 'O-L', lineNo: 1, sku: 'S' } });
    });

    it('createIfAbsent refuses a uniqueBy that is no unique index, or that the record does not fill', async () => {
      const store = outside();
      expect(
        await store.createIfAbsent('orders', { id: 'O-U', customerId: 'C', status: 'new' }, ['status']),
      ).toMatchObject({
        ok: false,
        error: { code: 'UNIQUE_REQUIRED' },
      });
      expect(await store.createIfAbsent('orders', { id: 'O-U', customerId: 'C', status: 'new' }, [])).toMatchObject({
        ok: false,
        error: { code: 'UNIQUE_REQUIRED' },
      });
      expect(await store.createIfAbsent('sink', { kind: 'sms' }, ['kind', 'idempotencyKey'])).toMatchObject({
        ok: false,
        error: { code: 'VALUE_INVALID' },
      });
      expect(await store.createIfAbsent('orders', { id: null, customerId: 'C', status: 'new' }, ['id'])).toMatchObject({
        ok: false,
        error: { code: 'VALUE_INVALID' },
      });
    });

    it('createIfAbsent from concurrent transactions creates one row; the others get it', async () => {
      const results = await Promise.all(
        Array.from({ length: 8 }, (_, i) =>
          inTx(async (s) => {
            const r = unwrap(
              await s.createIfAbsent('sink', { kind: 'race', idempotencyKey: 'K' }, ['kind', 'idempotencyKey']),
            );
            // sleep: the creator holds its transaction open while the others try.
            await sleep(i === 0 ? 30 : 0);
            return r.created;
          }),
        ),
      );
      expect(results.filter(Boolean)).toHaveLength(1);
      expect(unwrap(await outside().find('sink', { kind: 'race' }))).toHaveLength(1);
    });

    it('keeps createdAt/updatedAt and refuses callers that set them', async () => {
      const store = outside();
      clock = 1_700_000_100_000;
      unwrap(await store.createIfAbsent('orders', { id: 'O-T', customerId: 'C', status: 'new' }, ['id']));
      clock += 60_000;
      expect(unwrap(await store.update('orders', { id: 'O-T' }, { status: 'paid' }))).toEqual({ affected: 1 });
      expect(unwrap(await store.get('orders', { id: 'O-T' }))).toMatchObject({
        createdAt: 1_700_000_100_000,
        updatedAt: 1_700_000_160_000,
      });
      for (const result of [
        await store.createIfAbsent('orders', { id: 'O-R', customerId: 'C', status: 'new', createdAt: 1 }, ['id']),
        await store.createIfAbsent('orders', { id: 'O-R', customerId: 'C', status: 'new', updated_at: 1 }, ['id']),
        await store.update('orders', { id: 'O-T' }, { updatedAt: 5 }),
        await store.applyVersion('orders', { id: 'O-T' }, 9, { createdAt: 5 }),
      ]) {
        expect(result).toMatchObject({ ok: false, error: { code: 'FIELD_RESERVED' } });
      }
      expect(unwrap(await store.get('orders', { id: 'O-R' }))).toBeNull();
      // Reading by them is fine.
      expect(unwrap(await store.find('orders', { createdAt: op.gte(1_700_000_100_000) })).map((r) => r.id)).toContain(
        'O-T',
      );
    });

    it('stores Date, JSON, booleans, bigint and dates by column type, the same on both dialects', async () => {
      const store = outside();
      clock = Date.UTC(2024, 4, 1, 12);
      const happenedAt = new Date(Date.UTC(2024, 3, 30, 8, 15, 0, 123));
      const record = unwrap(
        await store.createIfAbsent(
          'events',
          {
            id: 'EV-1',
            payload: { a: [1, 'two'], b: null },
            happenedAt,
            flag: true,
            day: '2024-05-01',
            big: 2n ** 40n,
          },
          ['id'],
        ),
      ).record;
      expect(record).toEqual({
        id: 'EV-1',
        payload: { a: [1, 'two'], b: null },
        happenedAt,
        flag: true,
        day: '2024-05-01',
        big: 2 ** 40,
        createdAt: new Date(clock),
        updatedAt: new Date(clock).toISOString(),
      });
      unwrap(
        await store.update(
          'events',
          { id: 'EV-1' },
          { flag: false, happenedAt: happenedAt.getTime() + 1, tags: undefined },
        ),
      );
      expect(unwrap(await store.get('events', { flag: false, happenedAt: op.gt(happenedAt) }))).toMatchObject({
        id: 'EV-1',
        flag: false,
        happenedAt: new Date(happenedAt.getTime() + 1),
      });
      // Undefined fields are dropped.
      unwrap(
        await store.createIfAbsent('customers', { id: 'C-J', email: 'j@x.io', tags: 'vip', name: undefined }, ['id']),
      );
      expect(unwrap(await store.get('customers', { id: 'C-J' }))).toEqual({
        id: 'C-J',
        email: 'j@x.io',
        name: null,
        tags: 'vip',
      });
      // Booleans in an integer column are 0/1.
      unwrap(await store.createIfAbsent('inventory', { sku: 'BOOL', quantity: true }, ['sku']));
      expect(unwrap(await store.get('inventory', { sku: 'BOOL' }))).toEqual({ sku: 'BOOL', quantity: 1 });
    });

    it('update is a state transition: among concurrent callers exactly one wins', async () => {
      const store = outside();
      unwrap(await store.createIfAbsent('orders', { id: 'O-RACE', customerId: 'C', status: 'paid' }, ['id']));
      const affected = await Promise.all(
        Array.from({ length: 6 }, () =>
          inTx(async (s) => {
            const r = unwrap(await s.update('orders', { id: 'O-RACE', status: 'paid' }, { status: 'shipped' }));
            await sleep(20); // sleep: hold the row so the others queue behind this transaction
            return r.affected;
          }),
        ),
      );
      expect(affected.sort()).toEqual([0, 0, 0, 0, 0, 1]);
      expect(unwrap(await store.get('orders', { id: 'O-RACE' }))).toMatchObject({ status: 'shipped' });
    });

    it('update and find understand op.eq, ne, in, lt, lte, gt, gte, isNull and notNull', async () => {
      const store = outside();
      for (const [i, amount] of [10, 20, 30, null].entries()) {
        unwrap(
          await store.createIfAbsent('orders', { id: `W-${i}`, customerId: 'W', status: 'new', amountCents: amount }, [
            'id',
          ]),
        );
      }
      const ids = async (where: Record<string, unknown>) =>
        unwrap(await store.find('orders', { customerId: 'W', ...where })).map((r) => r.id);
      expect(await ids({ amountCents: 20 })).toEqual(['W-1']);
      expect(await ids({ amountCents: op.eq(20) })).toEqual(['W-1']);
      expect(await ids({ amountCents: op.ne(20) })).toEqual(['W-0', 'W-2', 'W-3']);
      expect(await ids({ amountCents: op.in([10, 30]) })).toEqual(['W-0', 'W-2']);
      expect(await ids({ amountCents: op.lt(20) })).toEqual(['W-0']);
      expect(await ids({ amountCents: op.lte(20) })).toEqual(['W-0', 'W-1']);
      expect(await ids({ amountCents: op.gt(20) })).toEqual(['W-2']);
      expect(await ids({ amountCents: op.and(op.gte(20), op.lt(30)) })).toEqual(['W-1']);
      expect(await ids({ amountCents: op.isNull() })).toEqual(['W-3']);
      expect(await ids({ amountCents: null })).toEqual(['W-3']);
      expect(await ids({ amountCents: op.notNull() })).toEqual(['W-0', 'W-1', 'W-2']);
      expect(
        unwrap(await store.update('orders', { customerId: 'W', amountCents: op.gte(20) }, { status: 'big' })),
      ).toEqual({
        affected: 2,
      });
      expect(await ids({ status: 'big' })).toEqual(['W-1', 'W-2']);
      expect(unwrap(await store.update('orders', { id: 'nope' }, { status: 'x' }))).toEqual({ affected: 0 });
    });

    it('find orders and limits; get returns one row or null', async () => {
      const store = outside();
      const rows = unwrap(
        await store.find(
          'orders',
          { customerId: 'W' },
          {
            orderBy: [
              ['amountCents', 'desc'],
              ['id', 'asc'],
            ],
            limit: 3,
          },
        ),
      );
      // NULLs sort last ascending and first descending, on both dialects.
      expect(rows.map((r) => r.amountCents)).toEqual([null, 30, 20]);
      expect(
        unwrap(await store.find('orders', { customerId: 'W' }, { orderBy: 'amount_cents' })).map((r) => r.id),
      ).toEqual(['W-0', 'W-1', 'W-2', 'W-3']);
      expect(unwrap(await store.find('orders', { customerId: 'W' }, { limit: 1 }))).toHaveLength(1);
      expect(unwrap(await store.get('orders', { id: 'W-2' }))).toMatchObject({ id: 'W-2', amountCents: 30 });
      expect(unwrap(await store.get('orders', { id: 'missing' }))).toBeNull();
      for (const limit of [0, -1, 1.5, 10_001]) {
        expect(await store.find('orders', {}, { limit })).toMatchObject({
          ok: false,
          error: { code: 'VALUE_INVALID' },
        });
      }
      expect(await store.find('orders', {}, { orderBy: [['id', 'up' as 'asc']] })).toMatchObject({
        ok: false,
        error: { code: 'VALUE_INVALID' },
      });
      expect(await store.find('orders', {}, { orderBy: 'colour' })).toMatchObject({
        ok: false,
        error: { code: 'COLUMN_UNKNOWN' },
      });
    });

    it('applyVersion applies newer versions, drops stale ones (2, 1, 3) and creates the row if absent', async () => {
      const store = outside();
      const apply = (version: number, status: string) =>
        store.applyVersion('orders', { id: 'O-V' }, version, { customerId: 'C', status });
      expect(unwrap(await apply(2, 'paid'))).toEqual({ applied: true });
      expect(unwrap(await apply(1, 'created'))).toEqual({ applied: false, reason: 'stale' });
      expect(unwrap(await apply(3, 'refunded'))).toEqual({ applied: true });
      expect(unwrap(await apply(3, 'again'))).toEqual({ applied: false, reason: 'stale' });
      expect(unwrap(await store.get('orders', { id: 'O-V' }))).toMatchObject({ status: 'refunded', version: 3 });
      // A partial patch updates an existing row...
      expect(unwrap(await store.applyVersion('orders', { id: 'O-V' }, 4, { status: 'closed' }))).toEqual({
        applied: true,
      });
      expect(unwrap(await store.applyVersion('orders', { id: 'O-V' }, 2, { status: 'x' }))).toEqual({
        applied: false,
        reason: 'stale',
      });
      expect(unwrap(await store.get('orders', { id: 'O-V' }))).toMatchObject({
        status: 'closed',
        version: 4,
        customerId: 'C',
      });
      // ...but cannot create one that needs more columns.
      expect(await store.applyVersion('orders', { id: 'O-NEW' }, 1, { status: 'x' })).toMatchObject({
        ok: false,
        error: { code: 'CONSTRAINT_VIOLATION' },
      });
    });

    it('applyVersion under concurrency keeps the newest version', async () => {
      const versions = [5, 2, 8, 1, 7, 3, 6, 4];
      const results = await Promise.all(
        versions.map((version) =>
          inTx(async (s) => {
            const r = unwrap(
              await s.applyVersion('orders', { id: 'O-CV' }, version, { customerId: 'C', status: `v${version}` }),
            );
            // sleep: each holds its transaction open a little, so the versions overlap.
            await sleep(5);
            return r.applied;
          }),
        ),
      );
      expect(results[versions.indexOf(8)]).toBe(true);
      expect(unwrap(await outside().get('orders', { id: 'O-CV' }))).toMatchObject({ version: 8, status: 'v8' });
    });

    it('applyVersion refusals', async () => {
      const store = outside();
      expect(await store.applyVersion('inventory', { sku: 'S' }, 1, { quantity: 1 })).toMatchObject({
        ok: false,
        error: { code: 'VERSION_COLUMN_REQUIRED' },
      });
      expect(await store.applyVersion('orders', { status: 'x' }, 1, {})).toMatchObject({
        ok: false,
        error: { code: 'UNIQUE_REQUIRED' },
      });
      expect(await store.applyVersion('orders', { id: 'O-V' }, 9, { version: 10 })).toMatchObject({
        ok: false,
        error: { code: 'FIELD_RESERVED' },
      });
      expect(await store.applyVersion('orders', { id: 'O-V' }, 1.5, {})).toMatchObject({
        ok: false,
        error: { code: 'VALUE_INVALID' },
      });
    });

    it('refuses an update without where, and malformed conditions', async () => {
      const store = outside();
      expect(await store.update('orders', {}, { status: 'x' })).toMatchObject({
        ok: false,
        error: { code: 'WHERE_REQUIRED' },
      });
      const invalid: [string, Record<string, unknown>][] = [
        ['op.in of a string', { id: op.in('O-1' as unknown as string[]) }],
        ['op.in of nothing', { id: op.in([]) }],
        ['op.in with null', { id: op.in(['O-1', null]) }],
        ['undefined', { id: undefined }],
        ['op.and of nothing', { id: op.and() }],
        ['op.lt(null)', { amountCents: op.lt(null) }],
        ['op.increment in a where', { amountCents: op.increment(1) }],
      ];
      for (const [what, where] of invalid) {
        expect(await store.update('orders', where, { status: 'x' }), what).toMatchObject({
          ok: false,
          error: { code: 'WHERE_INVALID' },
        });
        expect(await store.find('orders', where), what).toMatchObject({ ok: false, error: { code: 'WHERE_INVALID' } });
      }
      expect(unwrap(await store.get('orders', { id: 'O-1' }))).toMatchObject({ status: 'new' });
    });

    it('refuses values a column cannot hold before the database sees them', async () => {
      const store = outside();
      for (const value of ['ten', 1.5, { n: 1 }, Number.NaN, 2n ** 63n]) {
        expect(await store.update('orders', { id: 'O-1' }, { amountCents: value })).toMatchObject({
          ok: false,
          error: { code: 'VALUE_INVALID' },
        });
      }
      expect(await store.find('orders', { amountCents: 'ten' })).toMatchObject({
        ok: false,
        error: { code: 'VALUE_INVALID' },
      });
      expect(await store.update('events', { id: 'EV-1' }, { flag: 'yes' })).toMatchObject({
        ok: false,
        error: { code: 'VALUE_INVALID' },
      });
      expect(await store.update('events', { id: 'EV-1' }, { happenedAt: 'not a time' })).toMatchObject({
        ok: false,
        error: { code: 'VALUE_INVALID' },
      });
      expect(await store.update('orders', { id: 'O-1' }, {})).toMatchObject({
        ok: false,
        error: { code: 'VALUE_INVALID' },
      });
    });

    it('defect 11.19: increment keeps the integer checks of its column, on SQLite too', async () => {
      const store = outside();
      unwrap(await store.createIfAbsent('inventory', { sku: 'INC', quantity: 5 }, ['sku']));
      for (const step of [1.5, Number.NaN, Number.POSITIVE_INFINITY, 2n ** 63n, '2', true]) {
        expect(
          await store.update('inventory', { sku: 'INC' }, { quantity: op.increment(step as number) }),
          String(step),
        ).toMatchObject({ ok: false, error: { code: 'VALUE_INVALID' } });
      }
      expect(await store.update('orders', { id: 'O-1' }, { status: op.increment(1) })).toMatchObject({
        ok: false,
        error: { code: 'VALUE_INVALID' },
      });
      unwrap(await store.update('inventory', { sku: 'INC' }, { quantity: op.increment(-2) }));
      expect(unwrap(await store.get('inventory', { sku: 'INC' }))).toEqual({ sku: 'INC', quantity: 3 });
      const inventory = backend.app.namespace === null ? 'inventory' : `"${backend.app.namespace}".inventory`;
      // Stored as an integer, not as SQLite's REAL 3.0.
      expect(
        await backend.db.all(
          `SELECT typeof_q FROM (SELECT ${backend.app.dialect === 'sqlite' ? 'typeof(quantity)' : 'pg_typeof(quantity)::text'} AS typeof_q FROM ${inventory} WHERE sku = 'INC') AS q`,
        ),
      ).toEqual([{ typeof_q: 'integer' }]);
    });

    it('defect 11.19: the string "1e309" is refused where it would be stored as Infinity', async () => {
      const store = outside();
      for (const value of ['1e309', '-1e309', Number.POSITIVE_INFINITY]) {
        expect(await store.createIfAbsent('readings', { id: 'R-INF', value }, ['id']), String(value)).toMatchObject({
          ok: false,
          error: { code: 'VALUE_INVALID' },
        });
        expect(
          await store.createIfAbsent('customers', { id: 'C-INF', email: 'i@x.io', name: value }, ['id']),
        ).toMatchObject(typeof value === 'number' ? { ok: false, error: { code: 'VALUE_INVALID' } } : { ok: true });
      }
      const exact = await store.createIfAbsent('readings', { id: 'R-NUM', exact: '1e309' }, ['id']);
      if (backend.app.dialect === 'postgres') {
        // PostgreSQL's numeric holds it exactly (as text, like every numeric pg returns).
        expect(unwrap(exact).record.exact).toBe(`1${'0'.repeat(309)}`);
      } else expect(exact).toMatchObject({ ok: false, error: { code: 'VALUE_INVALID' } });
      unwrap(await store.createIfAbsent('readings', { id: 'R-1', value: '1.5e3' }, ['id']));
      expect(unwrap(await store.get('readings', { id: 'R-1' }))).toMatchObject({ value: 1500 });
    });

    it('defect 11.19: integers past 2^53 read back exact (as decimal text), never rounded', async () => {
      const store = outside();
      const big = 2n ** 60n + 1n;
      unwrap(await store.createIfAbsent('events', { id: 'EV-BIG', big }, ['id']));
      unwrap(await store.createIfAbsent('events', { id: 'EV-BIG2', big: '9007199254740993' }, ['id']));
      expect(unwrap(await store.get('events', { id: 'EV-BIG' }))).toMatchObject({ big: big.toString() });
      expect(unwrap(await store.get('events', { big: '9007199254740993' }))).toMatchObject({
        id: 'EV-BIG2',
        big: '9007199254740993',
      });
      const found = unwrap(await store.find('events', { big: op.in([big, 9007199254740993n]) }));
      expect(found.map((r) => r.big)).toEqual([big.toString(), '9007199254740993']);
      // Those a number holds stay numbers.
      unwrap(await store.createIfAbsent('events', { id: 'EV-SAFE', big: Number.MAX_SAFE_INTEGER }, ['id']));
      expect(unwrap(await store.get('events', { id: 'EV-SAFE' }))).toMatchObject({ big: Number.MAX_SAFE_INTEGER });
    });

    it('defect 11.19: a null patch, record or where and an in list past the driver limit are typed errors, not raw 500s', async () => {
      const store = outside();
      const invalid = { ok: false, error: { code: 'VALUE_INVALID' } };
      expect(await store.update('orders', { id: 'O-1' }, null as never)).toMatchObject(invalid);
      expect(await store.update('orders', { id: 'O-1' }, 'x' as never)).toMatchObject(invalid);
      expect(await store.createIfAbsent('orders', null as never, ['id'])).toMatchObject(invalid);
      expect(await store.applyVersion('orders', { id: 'O-1' }, 1, null as never)).toMatchObject(invalid);
      expect(await store.update('orders', null as never, { status: 'x' })).toMatchObject({
        ok: false,
        error: { code: 'WHERE_INVALID' },
      });
      const many = Array.from({ length: 70_000 }, (_, i) => `O-${i}`);
      expect(await store.find('orders', { id: op.in(many) })).toMatchObject({
        ok: false,
        error: { code: 'LIST_TOO_LONG' },
      });
    });

    it("maps NOT NULL, foreign key, CHECK and unique failures to CONSTRAINT_VIOLATION and keeps the caller's transaction usable", async () => {
      const outcome = await inTx(async (s) => {
        const results = [
          await s.createIfAbsent('orders', { id: 'O-NN', status: 'new' }, ['id']),
          await s.createIfAbsent('orderLines', { orderId: 'O-GHOST', lineNo: 1 }, ['orderId', 'lineNo']),
          await s.createIfAbsent('inventory', { sku: 'NEG', quantity: -1 }, ['sku']),
          await s.createIfAbsent('customers', { id: 'C-OTHER', email: 'a@x.io' }, ['id']),
          await s.update('orders', { id: 'O-1' }, { customerId: null }),
        ];
        // The transaction goes on after the refusals (on PostgreSQL too).
        unwrap(await s.createIfAbsent('inventory', { sku: 'AFTER', quantity: 3 }, ['sku']));
        return results;
      });
      for (const result of outcome) {
        expect(result).toMatchObject({ ok: false, error: { code: 'CONSTRAINT_VIOLATION' } });
      }
      expect(outcome[0]).toMatchObject({ error: { message: expect.stringMatching(/customer_id/) } });
      expect(unwrap(await outside().get('inventory', { sku: 'AFTER' }))).toEqual({ sku: 'AFTER', quantity: 3 });
      expect(unwrap(await outside().get('orders', { id: 'O-1' }))).toMatchObject({ customerId: 'C-1' });
    });

    it('never lets input become an identifier: unknown tables and columns are refused by name', async () => {
      const store = outside();
      const table = 'orders; drop table orders';
      expect(await store.get(table, {})).toMatchObject({ ok: false, error: { code: 'TABLE_UNKNOWN' } });
      expect(await store.find('"orders"', {})).toMatchObject({ ok: false, error: { code: 'TABLE_UNKNOWN' } });
      expect(await store.createIfAbsent(table, { id: 'x' }, ['id'])).toMatchObject({
        ok: false,
        error: { code: 'TABLE_UNKNOWN' },
      });
      expect(await store.update(table, { id: 'x' }, { status: 'x' })).toMatchObject({
        ok: false,
        error: { code: 'TABLE_UNKNOWN' },
      });
      expect(await store.applyVersion(table, { id: 'x' }, 1, {})).toMatchObject({
        ok: false,
        error: { code: 'TABLE_UNKNOWN' },
      });
      expect(await store.get('oncely_records', {})).toMatchObject({ ok: false, error: { code: 'TABLE_UNKNOWN' } });
      const column = '"x';
      const unknown = {
        ok: false,
        error: { code: 'COLUMN_UNKNOWN', message: expect.stringContaining(JSON.stringify(column)) },
      };
      expect(
        await store.createIfAbsent('orders', { id: 'O-X', customerId: 'C', status: 'new', [column]: 1 }, ['id']),
      ).toMatchObject(unknown);
      expect(await store.update('orders', { [column]: 1 }, { status: 'x' })).toMatchObject(unknown);
      expect(await store.update('orders', { id: 'O-1' }, { [column]: 1 })).toMatchObject(unknown);
      expect(await store.find('orders', {}, { orderBy: column })).toMatchObject(unknown);
      expect(
        await store.createIfAbsent('orders', { id: 'O-X', customerId: 'C', status: 'new' }, [column]),
      ).toMatchObject(unknown);
      expect(await store.applyVersion('orders', { [column]: 'x' }, 1, {})).toMatchObject(unknown);
      expect(await store.get('orders', { 'id" = "id" OR "1': 1 })).toMatchObject({
        ok: false,
        error: { code: 'COLUMN_UNKNOWN' },
      });
      // Values are only ever parameters: stored as written.
      const sneaky = "x'); DROP TABLE orders; --";
      unwrap(await store.createIfAbsent('orders', { id: sneaky, customerId: 'C', status: 'new' }, ['id']));
      expect(unwrap(await store.get('orders', { id: sneaky }))).toMatchObject({ id: sneaky });
      expect(unwrap(await store.find('orders', {}))).not.toHaveLength(0);
    });
  });
}

for (const { title, open } of selectStores<{ name: StoreName; title: string; open: () => Promise<Backend> }>([
  {
    name: 'sqlite',
    title: 'SQLite',
    open: async () => {
      const db = await openSqlite(join(dir, 'app.db'));
      await db.exec(ddl(''));
      return { db, app: await readSchema(db), close: () => db.close() };
    },
  },
  {
    name: 'postgres',
    title: 'PostgreSQL',
    open: async () => {
      const schema = freshSchema();
      const db = await openPostgres(POSTGRES_URL);
      await db.exec(`CREATE SCHEMA "${schema}"; ${ddl(`"${schema}".`)}`);
      return {
        db,
        app: await readSchema(db, { schema }),
        close: async () => {
          await db.close();
          await dropSchema(schema);
        },
      };
    },
  },
]))
  describeDataStore(title, open);

describe('names', () => {
  it('maps camelCase and snake_case both ways', () => {
    expect(snakeCase('customerId')).toBe('customer_id');
    expect(snakeCase('HTTPStatus')).toBe('http_status');
    expect(snakeCase('sku')).toBe('sku');
    expect(camelCase('customer_id')).toBe('customerId');
    expect(camelCase('address_line_1')).toBe('addressLine1');
    expect(camelCase('idempotency_key')).toBe('idempotencyKey');
  });
});
