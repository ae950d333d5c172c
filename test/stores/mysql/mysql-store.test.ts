import { randomUUID } from 'node:crypto';
import mysql from 'mysql2/promise';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createOncely, type StoredRecord } from '../../../src/index.js';
import { mysqlStore } from '../../../src/mysql/index.js';
import { createDatabase, databaseUrl, dropDatabase, freshDatabase, MYSQL_URL, testPool } from '../../support/mysql.js';
import { until } from '../../support/wait.js';

const database = freshDatabase();
const pool = testPool(database);
const count = async (sql: string, values: unknown[] = []) =>
  Number(((await pool.query(sql, values))[0] as { n: number }[])[0]?.n);

beforeAll(() => createDatabase(database));
afterAll(async () => {
  await pool.end();
  await dropDatabase(database);
});

/** `target` with every round trip it is sent counted (a script of several statements is one). */
function counted(target: mysql.Pool) {
  const sent = { n: 0 };
  const query = (run: (text: string, values?: unknown) => Promise<unknown>) => (text: string, values?: unknown) => {
    sent.n++;
    return run(text, values);
  };
  const pool = {
    query: query((text, values) => target.query(text, values as unknown[])),
    async getConnection() {
      const connection = await target.getConnection();
      return {
        query: query((text, values) => connection.query(text, values as unknown[])),
        release: () => connection.release(),
        destroy: () => connection.destroy(),
      };
    },
    end: async () => {},
  };
  return { pool: pool as unknown as mysql.Pool, sent };
}

/** A claim as the engine writes it, absolute times, for writes straight to the store. */
function claim(key: string, fields: Partial<StoredRecord> = {}): StoredRecord {
  const now = Date.now();
  return {
    tenant: 'acme',
    action: 'direct',
    key,
    state: 'in_progress',
    fingerprint: 'fp',
    fence: 1,
    attempts: 1,
    leaseUntil: now + 60_000,
    result: null,
    traceId: randomUUID(),
    createdAt: now,
    updatedAt: now,
    completedAt: null,
    expiresAt: now + 60_000,
    ...fields,
  };
}

describe("mysql: a caller's transaction", () => {
  it('the record commits or rolls back with the business rows (payment_record)', async () => {
    const once = await createOncely({ store: mysqlStore({ pool, table: 'tx_records' }) });
    await pool.query(
      'CREATE TABLE payment_record (order_id VARCHAR(64) PRIMARY KEY, amount INT NOT NULL) ENGINE=InnoDB',
    );
    const pay = async (orderId: string, fail: boolean) => {
      const connection = await pool.getConnection();
      try {
        await connection.beginTransaction();
        const r = await once.run({ action: 'pay', key: orderId, tx: connection }, async () => {
          await connection.query('INSERT INTO payment_record VALUES (?, 100)', [orderId]);
          return 'written';
        });
        if (fail) throw new Error('later step failed');
        await connection.commit();
        return r;
      } catch (error) {
        await connection.rollback();
        throw error;
      } finally {
        connection.release();
      }
    };
    await expect(pay('O-1', true)).rejects.toThrow('later step failed');
    expect(await once.get('pay', 'O-1')).toBeNull();
    expect(await count('SELECT COUNT(*) AS n FROM payment_record')).toBe(0);
    expect((await pay('O-1', false)).replayed).toBe(false);
    expect((await once.get('pay', 'O-1'))?.state).toBe('succeeded');
    expect((await pay('O-1', false)).replayed).toBe(true);
    expect(await count('SELECT COUNT(*) AS n FROM payment_record')).toBe(1);
    // A pool runs each statement on some connection: never the caller's transaction.
    await expect(once.run({ action: 'pay', key: 'O-2', tx: pool }, async () => 1)).rejects.toMatchObject({
      code: 'INVALID_ARGUMENT',
    });
    await once.close();
  });

  it('a duplicate waits for the holding transaction, then replays what it committed', async () => {
    const once = await createOncely({ store: mysqlStore({ pool, table: 'tx_wait' }) });
    const holder = await pool.getConnection();
    await holder.beginTransaction();
    let runs = 0;
    await once.run({ action: 'a', key: 'K', tx: holder }, async () => ++runs);
    // The uncommitted row holds the key: the other caller's insert waits on its lock.
    const duplicate = once.run({ action: 'a', key: 'K' }, async () => ++runs);
    await until("the duplicate to wait on the holder's lock in the server", async () =>
      count(
        "SELECT COUNT(*) AS n FROM information_schema.PROCESSLIST WHERE ID <> CONNECTION_ID() AND COMMAND = 'Query' AND INFO LIKE ?",
        ['%tx_wait%'],
      ),
    );
    await holder.commit();
    holder.release();
    expect(await duplicate).toMatchObject({ replayed: true, value: 1 });
    expect(runs).toBe(1);
    await once.close();
  });
});

describe('mysql: lost connections', () => {
  it("a KILLed connection of a caller's transaction answers STORE_UNAVAILABLE, the process lives, the next call works", async () => {
    const once = await createOncely({ store: mysqlStore({ pool, table: 'killed' }) });
    // A standalone connection: no pool listens for its 'error', so an unheard one would end the process.
    const connection = await mysql.createConnection({ uri: databaseUrl(database) });
    await connection.beginTransaction();
    await once.run({ action: 'a', key: 'warm', tx: connection }, async () => 1);
    expect(connection.listenerCount('error')).toBeGreaterThan(0);
    const [[{ id }]] = (await connection.query('SELECT CONNECTION_ID() AS id')) as unknown as [[{ id: number }]];
    await pool.query(`KILL ${Number(id)}`);
    // Killed while idle: mysql2 emits 'error' on the connection once the server's word of it arrives, which
    // it keeps as the connection's protocol error.
    await until(
      "the killed connection's error",
      () => (connection as unknown as { connection: { _protocolError?: Error } }).connection._protocolError,
    );
    let runs = 0;
    await expect(once.run({ action: 'a', key: 'k', tx: connection }, async () => runs++)).rejects.toMatchObject({
      code: 'STORE_UNAVAILABLE',
    });
    expect(runs).toBe(0);
    expect(await once.run({ action: 'a', key: 'k' }, async () => 'ok')).toMatchObject({ value: 'ok' });
    await once.close();
  });

  it("KILLing the store's connections in the middle of its completions: the process lives, each key runs once, all answered", async () => {
    // A database of its own: the store's connections are the ones whose current database it is.
    const owned = freshDatabase();
    await createDatabase(owned);
    const once = await createOncely({ store: mysqlStore({ uri: databaseUrl(owned) }), defaults: { lease: '5s' } });
    const runs = new Map<string, number>();
    let release: () => void = () => {};
    const gate = new Promise<void>((resolve) => {
      release = resolve;
    });
    let started = 0;
    const burst = Array.from({ length: 100 }, (_, i) =>
      once
        .run({ action: 'burst', key: `K-${i}` }, async () => {
          runs.set(`K-${i}`, (runs.get(`K-${i}`) ?? 0) + 1);
          started++;
          await gate;
          return i;
        })
        .then(
          (r) => ({ ok: true as const, value: r.value }),
          (error: { code?: string }) => ({ ok: false as const, code: error.code }),
        ),
    );
    await until(
      'all 100 functions to start',
      () => started,
      (n) => n === 100,
    );
    // Another session locks every claim, so the completions' statements wait in the server: KILLed mid-statement.
    const blocker = await mysql.createConnection({ uri: databaseUrl(owned) });
    await blocker.beginTransaction();
    await blocker.query('SELECT `key` FROM oncely_records FOR UPDATE');
    const [[{ id: blockerId }]] = (await blocker.query('SELECT CONNECTION_ID() AS id')) as unknown as [
      [{ id: number }],
    ];
    release();
    const waiting = await until(
      "the completions' statements to wait on the blocker's locks",
      async () =>
        (
          (await pool.query(
            "SELECT ID AS id FROM information_schema.PROCESSLIST WHERE DB = ? AND ID <> ? AND COMMAND = 'Query'",
            [owned, blockerId],
          )) as unknown as [{ id: number }[]]
        )[0],
      (found) => found.length > 0,
    );
    expect(waiting.length).toBeGreaterThan(0);
    for (const { id } of waiting) await pool.query(`KILL ${Number(id)}`);
    await blocker.rollback();
    await blocker.end();
    const answers = await Promise.all(burst);
    // The engine retries a completion that failed on a lost connection: it lands on another.
    expect(answers.filter((a) => !a.ok)).toEqual([]);
    expect(answers.map((a) => a.ok && a.value)).toEqual(Array.from({ length: 100 }, (_, i) => i));
    expect([...runs.values()]).toEqual(Array.from({ length: 100 }, () => 1));
    for (let i = 0; i < 100; i += 7)
      expect(await once.run({ action: 'burst', key: `K-${i}` }, async () => -1)).toMatchObject({
        replayed: true,
        value: i,
      });
    await once.close();
    await dropDatabase(owned);
  });

  it('reports a server it cannot reach as STORE_UNAVAILABLE and never runs the function', async () => {
    const once = await createOncely({ store: mysqlStore({ uri: 'mysql://root@127.0.0.1:1/test' }) });
    let runs = 0;
    await expect(once.run({ action: 'a', key: 'k' }, async () => runs++)).rejects.toMatchObject({
      code: 'STORE_UNAVAILABLE',
    });
    expect(runs).toBe(0);
    await once.close();
  });
});

describe('mysql specifics', () => {
  it('keys are byte-exact: case, trailing spaces, accents and emoji are distinct records', async () => {
    const once = await createOncely({ store: mysqlStore({ pool, table: 'exact' }) });
    const keys = ['key', 'Key', 'KEY', 'key ', 'clé', 'cle', 'cle\u0301', '🎉', '😀', 'ß', 'ss'];
    for (const key of keys) expect((await once.run({ action: 'a', key }, async () => key)).replayed).toBe(false);
    for (const key of keys)
      expect(await once.run({ action: 'a', key }, async () => 'again')).toMatchObject({
        replayed: true,
        value: key,
      });
    expect(await count('SELECT COUNT(*) AS n FROM exact')).toBe(keys.length);
    await once.close();
  });

  it('a record the database refuses fails its own caller only, not the batch it shares', async () => {
    const store = mysqlStore({ pool, table: 'refused' });
    // Fingerprints are SHA-256 hex; one of 300 characters is over the column's 255.
    const answers = await Promise.allSettled([
      store.insertOrGet(claim('ok-1')),
      store.insertOrGet(claim('bad', { fingerprint: 'f'.repeat(300) })),
      store.insertOrGet(claim('ok-2')),
    ]);
    expect(answers.map((a) => a.status)).toEqual(['fulfilled', 'rejected', 'fulfilled']);
    expect(await count('SELECT COUNT(*) AS n FROM refused')).toBe(2);
    await store.close();
  });

  it('migrates once when many processes start together; the ledger is the convention of the other SQL stores', async () => {
    const fresh = freshDatabase();
    const stores = Array.from({ length: 6 }, () => mysqlStore({ uri: MYSQL_URL, database: fresh }));
    await Promise.all(stores.map((store) => store.migrate()));
    const other = mysqlStore({ uri: MYSQL_URL, database: fresh, table: 'second' });
    await other.migrate();
    const [ledger] = await pool.query(
      `SELECT component, version FROM \`${fresh}\`.oncely_component_migrations ORDER BY component`,
    );
    expect(ledger).toEqual([
      { component: 'records', version: 1 },
      { component: 'records:second', version: 1 },
    ]);
    expect(await count(`SELECT COUNT(*) AS n FROM \`${fresh}\`.oncely_records`)).toBe(0);
    for (const store of [...stores, other]) await store.close();
    await dropDatabase(fresh);
  });

  it('sends a claim and its read, and a completion and its transaction, in one round trip each on a pool that takes several statements; one by one on another', async () => {
    const scripted = testPool(database, 2, true);
    for (const [target, table, perClaim, perCompletion] of [
      [pool, 'trips_plain', 2, 4],
      [scripted, 'trips_scripted', 1, 1],
    ] as const) {
      const { pool: wrapped, sent } = counted(target);
      const store = mysqlStore({ pool: wrapped, table });
      await store.migrate();
      sent.n = 0;
      const { record } = await store.insertOrGet(claim('K-1'));
      expect(sent.n).toBe(perClaim);
      sent.n = 0;
      const applied = await store.update(
        record,
        { fence: 1, states: ['in_progress'] },
        { state: 'succeeded', result: '1' },
      );
      expect(applied).toEqual(expect.any(Number));
      expect(sent.n).toBe(perCompletion);
      expect((await store.get(record))?.state).toBe('succeeded');
      await store.close();
    }
    await scripted.end();
  });

  it('conditional writes of every shape share one statement: each applies only on its own expectation, sets only its own fields', async () => {
    const scripted = testPool(database, 2, true);
    for (const [target, table] of [
      [scripted, 'mixed_scripted'],
      [pool, 'mixed_plain'],
    ] as const) {
      const { pool: wrapped, sent } = counted(target);
      const store = mysqlStore({ pool: wrapped, table });
      const lease = Date.now() + 60_000;
      const ids = ['acme', 'beta'].flatMap((tenant) =>
        ['K-0', 'K-1', 'K-2', 'K-3', 'K-4'].map((key) => ({ tenant, action: 'direct', key })),
      );
      const before = new Map<string, StoredRecord>();
      for (const id of ids) {
        const { record } = await store.insertOrGet(claim(id.key, { tenant: id.tenant, leaseUntil: lease }));
        before.set(`${id.tenant}/${id.key}`, record);
      }
      const at = (tenant: string, key: string) => ({ tenant, action: 'direct', key });
      const holder = { fence: 1, states: ['in_progress'] as const };
      const settlement = { by: 'ops', at: 1_700_000_000_000, answer: 'value' as const, note: 'checked' };
      sent.n = 0;
      // All in one tick: one batch, one statement per tenant.
      const answers = await Promise.all([
        store.update(at('acme', 'K-0'), holder, { state: 'succeeded', result: '"a0"', leaseUntil: null }),
        // A fence the row has moved past: fenced out.
        store.update(at('acme', 'K-1'), { fence: 2, states: ['in_progress'] }, { state: 'succeeded', result: '"x"' }),
        // A renewal that expects the lease as it is, and one that expects another.
        store.update(at('acme', 'K-2'), { ...holder, leaseUntil: lease }, { leaseUntil: lease + 5_000 }),
        store.update(at('acme', 'K-3'), { ...holder, leaseUntil: lease - 1 }, { leaseUntil: lease + 5_000 }),
        store.update(
          at('acme', 'K-4'),
          holder,
          { state: 'unknown', settlement, leaseUntil: null, expiresAt: null },
          undefined,
          { relative: true },
        ),
        // Times from the database's clock: the answer is the clock the write applied at.
        store.update(
          at('beta', 'K-0'),
          holder,
          { state: 'released', leaseUntil: null, updatedAt: 0, expiresAt: 1_000 },
          undefined,
          { relative: true },
        ),
        store.update(at('beta', 'K-1'), { fence: 1, states: ['succeeded'] }, { state: 'failed', result: '"x"' }),
        store.update(at('beta', 'K-2'), { fence: 1, states: ['succeeded', 'in_progress'] }, { result: '"b2"' }),
        store.update(at('beta', 'K-3'), holder, { state: 'succeeded', result: '"b3"', leaseUntil: null }),
      ]);
      if (target === scripted) expect(sent.n).toBe(1);
      expect(answers.map((a) => a !== null)).toEqual([true, false, true, false, true, true, false, true, true]);
      const now = answers[5] as number;
      const stored = (tenant: string, key: string) => store.get(at(tenant, key));
      const was = (tenant: string, key: string) => before.get(`${tenant}/${key}`) as StoredRecord;
      expect(await stored('acme', 'K-0')).toEqual({
        ...was('acme', 'K-0'),
        state: 'succeeded',
        result: '"a0"',
        leaseUntil: null,
      });
      expect(await stored('acme', 'K-1')).toEqual(was('acme', 'K-1'));
      expect(await stored('acme', 'K-2')).toEqual({ ...was('acme', 'K-2'), leaseUntil: lease + 5_000 });
      expect(await stored('acme', 'K-3')).toEqual(was('acme', 'K-3'));
      expect(await stored('acme', 'K-4')).toEqual({
        ...was('acme', 'K-4'),
        state: 'unknown',
        settlement,
        leaseUntil: null,
        expiresAt: null,
      });
      expect(await stored('beta', 'K-0')).toEqual({
        ...was('beta', 'K-0'),
        state: 'released',
        leaseUntil: null,
        updatedAt: now,
        expiresAt: now + 1_000,
      });
      expect(await stored('beta', 'K-1')).toEqual(was('beta', 'K-1'));
      expect(await stored('beta', 'K-2')).toEqual({ ...was('beta', 'K-2'), result: '"b2"' });
      expect(await stored('beta', 'K-3')).toEqual({
        ...was('beta', 'K-3'),
        state: 'succeeded',
        result: '"b3"',
        leaseUntil: null,
      });
      // Untouched by the batch.
      expect(await stored('acme', 'K-4').then((r) => r?.fence)).toBe(1);
      expect(await stored('beta', 'K-4')).toEqual(was('beta', 'K-4'));
      await store.close();
    }
    await scripted.end();
  });

  it('a batch of completions whose keys differ only in case, trailing spaces, accents or emoji gives each its own result', async () => {
    const scripted = testPool(database, 2, true);
    const store = mysqlStore({ pool: scripted, table: 'exact_batch' });
    const keys = ['key', 'Key', 'KEY', 'key ', 'clé', 'cle', 'cle\u0301', '🎉', '😀', 'ß', 'ss'];
    const at = (key: string) => ({ tenant: 'acme', action: 'direct', key });
    await Promise.all(keys.map((key) => store.insertOrGet(claim(key))));
    const holder = { fence: 1, states: ['in_progress'] as const };
    const applied = await Promise.all(
      keys.map((key, i) =>
        // Half of them hold another fence: their rows are left as they are.
        store.update(
          at(key),
          { ...holder, fence: i % 2 === 0 ? 1 : 7 },
          { state: 'succeeded', result: JSON.stringify(key) },
        ),
      ),
    );
    expect(applied.map((a) => a !== null)).toEqual(keys.map((_, i) => i % 2 === 0));
    for (const [i, key] of keys.entries())
      expect(await store.get(at(key))).toMatchObject(
        i % 2 === 0 ? { state: 'succeeded', result: JSON.stringify(key) } : { state: 'in_progress', result: null },
      );
    await store.close();
    await scripted.end();
  });

  it('a write the database refuses fails its own caller only, and its script leaves no transaction open behind it', async () => {
    // One connection: the next script runs on the one the refused script used.
    const scripted = testPool(database, 1, true);
    const store = mysqlStore({ pool: scripted, table: 'refused_writes' });
    const holder = { fence: 1, states: ['in_progress'] as const };
    const ids = ['ok-1', 'ok-2', 'bad'].map((key) => ({ tenant: 'acme', action: 'direct', key }));
    const id = (i: number) => ids[i] as (typeof ids)[number];
    for (const { key } of ids) await store.insertOrGet(claim(key));
    // Fingerprints are SHA-256 hex; one of 300 characters is over the column's 255. The batch's
    // script stops at its UPDATE; then each write goes alone, the refused one last.
    const answers = await Promise.allSettled([
      store.update(id(0), holder, { state: 'succeeded', result: '1' }),
      store.update(id(1), holder, { state: 'succeeded', result: '2' }),
      store.update(id(2), holder, { fingerprint: 'f'.repeat(300) }),
    ]);
    expect(answers.map((a) => a.status)).toEqual(['fulfilled', 'fulfilled', 'rejected']);
    expect((answers[2] as PromiseRejectedResult).reason).toMatchObject({ sqlState: '22001' });
    // A claim on the same connection commits on its own: no transaction was left open around it.
    await store.insertOrGet(claim('after'));
    const other = await mysql.createConnection({ uri: databaseUrl(database) });
    const [seen] = await other.query("SELECT `key` FROM refused_writes WHERE `key` = 'after'");
    expect(seen).toHaveLength(1);
    // And another session writes every row without waiting on a lock a half-run script kept.
    await other.query('SET SESSION innodb_lock_wait_timeout = 2');
    const [written] = await other.query("UPDATE refused_writes SET trace_id = 'other'");
    expect((written as { affectedRows: number }).affectedRows).toBe(4);
    await other.end();
    expect((await store.get(id(1)))?.state).toBe('succeeded');
    expect((await store.get(id(2)))?.state).toBe('in_progress');
    await store.close();
    await scripted.end();
  });

  it('refuses names that are not plain identifiers, and a pool that is not one', () => {
    expect(() => mysqlStore({ pool, table: 'Bad-Name' })).toThrow(
      expect.objectContaining({ code: 'INVALID_ARGUMENT' }),
    );
    expect(() => mysqlStore({ uri: MYSQL_URL, database: 'x`; DROP' })).toThrow(
      expect.objectContaining({ code: 'INVALID_ARGUMENT' }),
    );
    expect(() => mysqlStore({ pool: {} as never })).toThrow(expect.objectContaining({ code: 'INVALID_ARGUMENT' }));
  });
});
