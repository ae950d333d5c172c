import type pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Batcher } from '../../../src/core/batcher.js';
import { InvalidArgumentError, OncelyError } from '../../../src/core/errors.js';
import type { RecordId, StoredRecord } from '../../../src/core/record.js';
import { type PgPool, type PostgresStore, postgresStore } from '../../../src/postgres/index.js';
import { dropSchema, freshSchema, POSTGRES_URL, testPool } from '../../support/postgres.js';
import { until } from '../../support/wait.js';

const schema = freshSchema();
const pools: pg.Pool[] = [];
const stores: PostgresStore[] = [];
const schemas = [schema];
let pool: pg.Pool;
let store: PostgresStore;

function newPool(max = 10): pg.Pool {
  const p = testPool(max);
  pools.push(p);
  return p;
}

function newStore(options: { batch?: boolean; schema?: string; pool?: PgPool } = {}): PostgresStore {
  const s = postgresStore({ pool: options.pool ?? pool, schema: options.schema ?? schema, batch: options.batch });
  stores.push(s);
  return s;
}

let counter = 0;
/** A fresh in_progress record; `key` defaults to one no other test uses. */
function record(overrides: Partial<StoredRecord> = {}): StoredRecord {
  counter += 1;
  return {
    tenant: 'acme',
    action: 'charge',
    key: `k-${counter}-${Math.random().toString(36).slice(2, 8)}`,
    state: 'in_progress',
    fingerprint: 'fp-1',
    fence: 1,
    attempts: 1,
    leaseUntil: 10_000,
    result: null,
    traceId: `trace-${counter}`,
    createdAt: 1_000,
    updatedAt: 1_000,
    completedAt: null,
    expiresAt: null,
    ...overrides,
  };
}

const idOf = ({ tenant, action, key }: RecordId): RecordId => ({ tenant, action, key });

beforeAll(async () => {
  pool = newPool();
  store = newStore();
  await store.migrate();
});

afterAll(async () => {
  await Promise.allSettled(stores.map((s) => s.close()));
  await Promise.allSettled(pools.map((p) => p.end()));
  for (const name of schemas) await dropSchema(name);
});

describe('postgresStore: insertOrGet', () => {
  it('inserts once, then returns the existing record to a duplicate', async () => {
    const first = record();
    expect(await store.insertOrGet(first)).toEqual({ inserted: true, record: first, now: expect.any(Number) });
    const again = await store.insertOrGet({ ...first, fingerprint: 'fp-2', traceId: 'other' });
    expect(again).toEqual({ inserted: false, record: first, now: expect.any(Number) });
    expect(await store.get(idOf(first))).toEqual(first);
  });

  it('gives exactly one of 200 concurrent claims of one key the insert, across batches and pools', async () => {
    const other = newStore({ pool: newPool() });
    const base = record();
    const results = await Promise.all(
      Array.from({ length: 200 }, async (_, i) => {
        // sleep: spread the calls over several ticks so they land in several batches.
        await new Promise((resolve) => setTimeout(resolve, i % 7));
        return (i % 2 ? store : other).insertOrGet({ ...base, fingerprint: `fp-${i}` });
      }),
    );
    const winners = results.filter((r) => r.inserted);
    expect(winners).toHaveLength(1);
    for (const r of results) expect(r.record.fingerprint).toBe(winners[0]?.record.fingerprint);
  });

  it('inserts concurrent unique records, more than one batch holds', async () => {
    const records = Array.from({ length: 1_200 }, () => record());
    const results = await Promise.all(records.map((r) => store.insertOrGet(r)));
    expect(results.every((r, i) => r.inserted && r.record.key === records[i]?.key)).toBe(true);
    expect(await store.get(idOf(records[1_199] as StoredRecord))).toEqual(records[1_199]);
  });

  it('gives every store exactly one insert per key when four pools race over the same keys', async () => {
    const racers = [store, ...Array.from({ length: 3 }, () => newStore({ pool: newPool() }))];
    const keys = Array.from({ length: 300 }, () => record());
    const results = await Promise.all(
      racers.map((s, n) => {
        // Each racer claims in its own order: batches overlap in opposite orders.
        const order = n % 2 ? [...keys].reverse() : keys;
        return Promise.all(order.map((r) => s.insertOrGet({ ...r, traceId: `racer-${n}` })));
      }),
    );
    const wins = new Map<string, number>();
    for (const r of results.flat()) if (r.inserted) wins.set(r.record.key, (wins.get(r.record.key) ?? 0) + 1);
    expect(wins.size).toBe(keys.length);
    expect([...wins.values()].every((n) => n === 1)).toBe(true);
  });

  it('keeps text with quotes, commas, braces, backslashes and NULL intact through a batch', async () => {
    const odd = ['a,b', '"q"', '{x}', 'back\\slash', 'NULL', ' spaced ', 'ünï©ødé 🎉', "it's"];
    const records = odd.map((text) => record({ key: `odd:${text}:${counter}`, tenant: text, result: text }));
    const results = await Promise.all(records.map((r) => store.insertOrGet(r)));
    expect(results.every((r) => r.inserted)).toBe(true);
    const read = await Promise.all(records.map((r) => store.get(idOf(r))));
    expect(read).toEqual(records);
  });

  it('fails only the caller whose record the database rejects, not its batch', async () => {
    const good = Array.from({ length: 5 }, () => record());
    const bad = record({ state: 'bogus' as StoredRecord['state'] });
    const results = await Promise.allSettled([...good, bad].map((r) => store.insertOrGet(r)));
    expect(results.slice(0, 5).every((r) => r.status === 'fulfilled' && r.value.inserted)).toBe(true);
    expect(results[5]?.status).toBe('rejected');
  });
});

describe('postgresStore: update', () => {
  it('applies a patch only when fence, state and (when given) lease match', async () => {
    const r = record({ leaseUntil: 5_000 });
    await store.insertOrGet(r);
    const id = idOf(r);
    expect(await store.update(id, { fence: 2, states: ['in_progress'] }, { state: 'succeeded' })).toBeNull();
    expect(await store.update(id, { fence: 1, states: ['released'] }, { state: 'succeeded' })).toBeNull();
    expect(await store.update(id, { fence: 1, states: ['in_progress'], leaseUntil: 4_999 }, { fence: 2 })).toBeNull();
    expect(await store.update(id, { fence: 1, states: ['in_progress'], leaseUntil: null }, { fence: 2 })).toBeNull();
    expect(await store.get(id)).toEqual(r);
    const patch = { state: 'succeeded' as const, result: '{"ok":true}', leaseUntil: null, completedAt: 6_000 };
    expect(await store.update(id, { fence: 1, states: ['in_progress', 'unknown'], leaseUntil: 5_000 }, patch)).toEqual(
      expect.any(Number),
    );
    expect(await store.get(id)).toEqual({ ...r, ...patch });
    // A null lease is matched as null, not ignored.
    expect(await store.update(id, { fence: 1, states: ['succeeded'], leaseUntil: null }, { attempts: 2 })).toEqual(
      expect.any(Number),
    );
    expect(await store.update(idOf(record()), { fence: 1, states: ['in_progress'] }, { fence: 2 })).toBeNull();
  });

  it('answers each caller of a batch mixing patch shapes, ids and outcomes', async () => {
    const rs = Array.from({ length: 6 }, () => record());
    await Promise.all(rs.map((r) => store.insertOrGet(r)));
    const [a, b, c, d, e, f] = rs.map(idOf) as [RecordId, RecordId, RecordId, RecordId, RecordId, RecordId];
    const inProgress = { fence: 1, states: ['in_progress'] as const };
    const answers = await Promise.all([
      store.update(a, inProgress, { state: 'succeeded', result: '"a"', completedAt: 2_000, expiresAt: 9_000_000 }),
      store.update(b, inProgress, { leaseUntil: 20_000, updatedAt: 1_500 }),
      store.update(c, { ...inProgress, fence: 7 }, { state: 'failed' }),
      store.update(d, inProgress, { fence: 2, attempts: 2, traceId: 'new', fingerprint: 'fp-9' }),
      store.update(e, { ...inProgress, leaseUntil: 10_000 }, { state: 'released', leaseUntil: null }),
      store.update(f, inProgress, {}),
      // Two writes to one id in one burst apply in order, as if sequential.
      store.update(b, inProgress, { attempts: 3 }),
      store.update(b, { fence: 1, states: ['succeeded'] }, { attempts: 4 }),
    ]);
    // One statement reads the clock once: every write that applied answers the same now.
    const now = answers[0];
    expect(now).toEqual(expect.any(Number));
    expect(answers).toEqual([now, now, null, now, now, now, expect.any(Number), null]);
    const read = await Promise.all(rs.map((r) => store.get(idOf(r))));
    expect(read).toEqual([
      { ...rs[0], state: 'succeeded', result: '"a"', completedAt: 2_000, expiresAt: 9_000_000 },
      { ...rs[1], leaseUntil: 20_000, updatedAt: 1_500, attempts: 3 },
      rs[2],
      { ...rs[3], fence: 2, attempts: 2, traceId: 'new', fingerprint: 'fp-9' },
      { ...rs[4], state: 'released', leaseUntil: null },
      rs[5],
    ]);
  });

  it('lets exactly one of many concurrent takeovers of a key win, across pools', async () => {
    const r = record({ leaseUntil: 500 });
    await store.insertOrGet(r);
    const racers = [store, newStore({ pool: newPool() })];
    const results = await Promise.all(
      Array.from({ length: 100 }, (_, i) =>
        racers[i % 2]?.update(
          idOf(r),
          { fence: 1, states: ['in_progress'], leaseUntil: 500 },
          { fence: 2, leaseUntil: 1_000 + i },
        ),
      ),
    );
    expect(results.filter((applied) => applied !== null)).toHaveLength(1);
  });

  it('does not deadlock when pools update overlapping keys in opposite orders', async () => {
    const rs = Array.from({ length: 200 }, () => record());
    await Promise.all(rs.map((r) => store.insertOrGet(r)));
    const racers = [store, ...Array.from({ length: 3 }, () => newStore({ pool: newPool() }))];
    const applied = await Promise.all(
      racers.flatMap((s, n) =>
        (n % 2 ? [...rs].reverse() : rs).map((r) =>
          s.update(idOf(r), { fence: 1, states: ['in_progress'] }, { updatedAt: 2_000 + n }),
        ),
      ),
    );
    expect(applied.every((at) => at !== null)).toBe(true);
  });

  it('rejects a patch of a field outside the record', async () => {
    const r = record();
    await store.insertOrGet(r);
    const bad = { key: 'other' } as never;
    await expect(store.update(idOf(r), { fence: 1, states: ['in_progress'] }, bad)).rejects.toThrow(
      InvalidArgumentError,
    );
  });
});

describe('postgresStore: get and purge', () => {
  it('returns null for a missing record, alone or in a batch', async () => {
    const r = record();
    await store.insertOrGet(r);
    expect(await store.get(idOf(record()))).toBeNull();
    const [found, missing, again] = await Promise.all([
      store.get(idOf(r)),
      store.get(idOf(record())),
      store.get(idOf(r)),
    ]);
    expect([found, missing, again]).toEqual([r, null, r]);
    expect(found).not.toBe(again);
  });

  it('purges only expired finished records and lapsed claims, at most `limit` a call', async () => {
    const tenant = `purge-${counter}`;
    const now = 100_000;
    const expired = Array.from({ length: 5 }, () => record({ tenant, state: 'succeeded', expiresAt: now - 1 }));
    const kept = [
      record({ tenant, state: 'succeeded', expiresAt: now + 1 }),
      record({ tenant, state: 'failed', expiresAt: null }),
      record({ tenant, state: 'unknown', expiresAt: now - 1 }),
      record({ tenant, state: 'in_progress', expiresAt: now - 1, leaseUntil: now + 1 }),
    ];
    const lapsed = record({ tenant, state: 'in_progress', expiresAt: now, leaseUntil: now });
    const released = record({ tenant, state: 'released', expiresAt: now, leaseUntil: null });
    const all = [...expired, ...kept, lapsed, released];
    await Promise.all(all.map((r) => store.insertOrGet(r)));
    // Other tests' records never expire, so every deletion here is one of ours.
    expect(await store.purgeExpired(now, 3)).toBe(3);
    expect(await store.purgeExpired(now, 100)).toBe(4);
    expect(await store.purgeExpired(now, 100)).toBe(0);
    const left = await Promise.all(all.map((r) => store.get(idOf(r))));
    expect(left.filter((r) => r !== null).map((r) => r?.key)).toEqual(kept.map((r) => r.key));
  });
});

describe('postgresStore: caller transactions', () => {
  it('rolls back and commits with the caller', async () => {
    const client = await pool.connect();
    try {
      const rolled = record();
      await client.query('BEGIN');
      expect((await store.insertOrGet(rolled, client)).inserted).toBe(true);
      expect(await store.get(idOf(rolled), client)).toEqual(rolled);
      expect(await store.get(idOf(rolled))).toBeNull();
      await client.query('ROLLBACK');
      expect(await store.get(idOf(rolled))).toBeNull();

      const committed = record();
      await client.query('BEGIN');
      await store.insertOrGet(committed, client);
      expect(await store.update(idOf(committed), { fence: 1, states: ['in_progress'] }, { fence: 2 }, client)).toEqual(
        expect.any(Number),
      );
      await client.query('COMMIT');
      expect(await store.get(idOf(committed))).toEqual({ ...committed, fence: 2 });
    } finally {
      client.release();
    }
  });

  it('refuses a tx that is not a pg client', async () => {
    await expect(store.insertOrGet(record(), { begin: true })).rejects.toThrow(InvalidArgumentError);
    await expect(store.get(idOf(record()), 'tx')).rejects.toThrow(InvalidArgumentError);
    await expect(store.get(idOf(record()), pool)).rejects.toThrow(InvalidArgumentError);
  });
});

describe('postgresStore: setup', () => {
  it('refuses schema and table names that are not plain identifiers', () => {
    for (const bad of ['Oncely', 'on-cely', '1abc', 'a"; drop table x; --', '', 'x'.repeat(64)]) {
      expect(() => postgresStore({ pool, schema: bad })).toThrow(InvalidArgumentError);
      expect(() => postgresStore({ pool, table: bad })).toThrow(InvalidArgumentError);
    }
  });

  it('migrates a fresh schema from four processes at once', async () => {
    const fresh = freshSchema();
    schemas.push(fresh);
    const racers = Array.from({ length: 4 }, () => newStore({ pool: newPool(2), schema: fresh }));
    await Promise.all(racers.map((s) => s.migrate()));
    await Promise.all(racers.map((s) => s.migrate()));
    const { rows } = await pool.query(
      `SELECT version FROM "${fresh}".oncely_component_migrations WHERE component = 'records' ORDER BY version`,
    );
    expect(rows).toEqual([{ version: 1 }, { version: 2 }]);
    const r = record();
    expect((await racers[3]?.insertOrGet(r))?.inserted).toBe(true);
    expect(await racers[0]?.get(idOf(r))).toEqual(r);
  });

  it("migrates on a connection of the pool and gives it back on the pool's own search path", async () => {
    const fresh = freshSchema();
    schemas.push(fresh);
    // One connection: the migration is sure to run on the one whose path was set.
    const single = newPool(1);
    await single.query(`SET search_path TO "${schema}", public`);
    await newStore({ pool: single, schema: fresh }).migrate();
    const { rows } = await single.query('SHOW search_path');
    expect(rows).toEqual([{ search_path: `${schema}, public` }]);
  });

  it('keeps a second table in the same schema apart', async () => {
    const other = postgresStore({ pool, schema, table: 'other_records' });
    stores.push(other);
    const r = record();
    expect((await other.insertOrGet(r)).inserted).toBe(true);
    expect(await store.get(idOf(r))).toBeNull();
  });

  it('migrates on first use after a failed first attempt', async () => {
    const fresh = freshSchema();
    schemas.push(fresh);
    let down = true;
    // The pool of a database that comes up after the store was made.
    const flaky: PgPool = {
      query: (text, values) => (down ? Promise.reject(new Error('connect ECONNREFUSED')) : pool.query(text, values)),
      connect: () => (down ? Promise.reject(new Error('connect ECONNREFUSED')) : pool.connect()),
      end: async () => {},
    };
    const s = newStore({ pool: flaky, schema: fresh });
    await expect(s.insertOrGet(record())).rejects.toThrow('ECONNREFUSED');
    down = false;
    expect((await s.insertOrGet(record())).inserted).toBe(true);
  });

  it('works unbatched', async () => {
    const s = newStore({ batch: false });
    const rs = Array.from({ length: 20 }, () => record());
    const results = await Promise.all(rs.map((r) => s.insertOrGet(r)));
    expect(results.every((r) => r.inserted)).toBe(true);
    expect(
      await Promise.all(rs.map((r) => s.update(idOf(r), { fence: 1, states: ['in_progress'] }, { fence: 2 }))),
    ).toEqual(rs.map(() => expect.any(Number)));
    expect((await s.insertOrGet(rs[0] as StoredRecord)).record.fence).toBe(2);
  });

  it('leaves a pool it was given open, and ends one it made', async () => {
    const given = newPool(1);
    const borrowed = postgresStore({ pool: given, schema });
    await borrowed.get(idOf(record()));
    await borrowed.close();
    expect((await given.query('SELECT 1 AS one')).rows).toEqual([{ one: 1 }]);
    await expect(borrowed.get(idOf(record()))).rejects.toSatisfy(
      (e: unknown) => e instanceof OncelyError && e.code === 'CLOSED',
    );

    const owning = postgresStore({ connectionString: POSTGRES_URL, schema });
    const r = record();
    expect((await owning.insertOrGet(r)).inserted).toBe(true);
    await owning.close();
    expect(await store.get(idOf(r))).toEqual(r);
  });
});

describe('postgresStore: batching', () => {
  it('sends a lone call at once and coalesces the calls that arrive while it is in flight', async () => {
    const sizes: number[] = [];
    let release!: () => void;
    const held = new Promise<void>((r) => {
      release = r;
    });
    const batcher = new Batcher<number, number>(async (items) => {
      sizes.push(items.length);
      if (sizes.length === 1) await held;
      return items.map((n) => n * 2);
    });
    const first = batcher.push(1);
    await until('the lone call to be sent', () => sizes.length === 1);
    expect(sizes).toEqual([1]);
    const rest = Array.from({ length: 10 }, (_, i) => batcher.push(i + 2));
    // sleep: a window in which the calls arriving while the first is in flight must not be sent.
    await new Promise((r) => setTimeout(r, 5));
    expect(sizes).toEqual([1]);
    release();
    expect(await Promise.all([first, ...rest])).toEqual(Array.from({ length: 11 }, (_, i) => (i + 1) * 2));
    expect(sizes).toEqual([1, 10]);
  });

  it('claims and completes 300 concurrent first executions in a handful of statements', async () => {
    let statements = 0;
    // The real pool, counted: every statement the store sends goes through query().
    const counted: PgPool = {
      query: (text, values) => {
        statements++;
        return pool.query(text, values);
      },
      connect: () => pool.connect(),
      end: async () => {},
    };
    const s = newStore({ pool: counted });
    await s.migrate();
    const rs = Array.from({ length: 300 }, () => record());
    const done = await Promise.all(
      rs.map(async (r) => {
        const { inserted } = await s.insertOrGet(r);
        const patch = { state: 'succeeded' as const, result: '1', leaseUntil: null };
        return inserted && (await s.update(idOf(r), { fence: 1, states: ['in_progress'], leaseUntil: 10_000 }, patch));
      }),
    );
    expect(done.every((at) => typeof at === 'number')).toBe(true);
    expect(statements).toBeLessThanOrEqual(6);
  });
});
