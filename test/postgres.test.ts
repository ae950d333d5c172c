import { afterAll, describe, expect, it } from 'vitest';
import { createOncely } from '../src/index.js';
import { postgresStore } from '../src/postgres/index.js';
import { describeConformance } from './conformance.js';
import { dropSchema, freshSchema, POSTGRES_URL, testPool } from './support/postgres.js';

const schema = freshSchema();
const pool = testPool();

afterAll(async () => {
  await pool.end();
  await dropSchema(schema);
});

describeConformance('postgres (url, batched)', () => postgresStore({ connectionString: POSTGRES_URL, schema }));
describeConformance('postgres (pool, unbatched)', () =>
  postgresStore({ pool, schema, table: 'unbatched', batch: false }),
);

describe('postgres specifics', () => {
  it("joins a caller's transaction: the record commits or rolls back with the business writes", async () => {
    const once = await createOncely({ store: postgresStore({ pool, schema, table: 'tx_records' }) });
    await pool.query(`CREATE TABLE "${schema}".ledger (order_id text PRIMARY KEY, amount int)`);
    const pay = async (orderId: string, fail: boolean) => {
      const client = await pool.connect();
      try {
        await client.query('BEGIN');
        const r = await once.run({ action: 'ledger', key: orderId, tx: client }, async () => {
          await client.query(`INSERT INTO "${schema}".ledger VALUES ($1, 100)`, [orderId]);
          return 'written';
        });
        if (fail) throw new Error('later step failed');
        await client.query('COMMIT');
        return r;
      } catch (error) {
        await client.query('ROLLBACK');
        throw error;
      } finally {
        client.release();
      }
    };
    await expect(pay('O-1', true)).rejects.toThrow('later step failed');
    expect(await once.get('ledger', 'O-1')).toBeNull();
    expect((await pool.query(`SELECT count(*)::int AS n FROM "${schema}".ledger`)).rows).toEqual([{ n: 0 }]);
    expect((await pay('O-1', false)).replayed).toBe(false);
    expect((await once.get('ledger', 'O-1'))?.state).toBe('succeeded');
    expect((await pay('O-1', false)).replayed).toBe(true);
    expect((await pool.query(`SELECT count(*)::int AS n FROM "${schema}".ledger`)).rows).toEqual([{ n: 1 }]);
    await expect(once.run({ action: 'ledger', key: 'O-2', tx: pool }, async () => 1)).rejects.toMatchObject({
      code: 'INVALID_ARGUMENT',
    });
    await once.close();
  });

  it('reports a database it cannot reach as STORE_UNAVAILABLE and never runs the function', async () => {
    const once = await createOncely({
      store: postgresStore({ connectionString: 'postgres://postgres@127.0.0.1:1/test', schema }),
    });
    let runs = 0;
    await expect(once.run({ action: 'a', key: 'k' }, async () => runs++)).rejects.toMatchObject({
      code: 'STORE_UNAVAILABLE',
    });
    expect(runs).toBe(0);
    await once.close();
  });
});
