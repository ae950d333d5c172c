import { afterAll, describe, expect, it } from 'vitest';
import { createOncely, type OncelyError } from '../../../src/index.js';
import { postgresStore } from '../../../src/postgres/index.js';
import { dropSchema, freshSchema, POSTGRES_URL, testPool } from '../../support/postgres.js';
import { describeConformance } from '../conformance.js';
import { describeListing } from '../listing.js';

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
describeListing('postgres', () => postgresStore({ connectionString: POSTGRES_URL, schema, table: 'listing' }), {
  idOrder: true,
});

// sleep: the helper for the waits below whose duration is the point (an outage's length, a quiet window).
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * A database that goes away for a while, for one store: the store logs in as its own role, and an
 * outage makes that role unable to log in and terminates its connections, as a failover does.
 */
async function outageRig() {
  const role = freshSchema();
  const owned = freshSchema();
  await pool.query(`CREATE ROLE "${role}" LOGIN`);
  await pool.query(`CREATE SCHEMA "${owned}" AUTHORIZATION "${role}"`);
  const url = new URL(POSTGRES_URL);
  url.username = role;
  return {
    store: () => postgresStore({ connectionString: url.toString(), schema: owned }),
    async down() {
      await pool.query(`ALTER ROLE "${role}" NOLOGIN`);
      await pool.query('SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = $1', [role]);
    },
    async up() {
      await pool.query(`ALTER ROLE "${role}" LOGIN`);
    },
    async drop() {
      await pool.query('SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = $1', [role]);
      await dropSchema(owned);
      await pool.query(`DROP ROLE IF EXISTS "${role}"`);
    },
  };
}

describe('postgres: outages', () => {
  it('defect 11.9: a store blip at completion does not re-run the effect: the completion is retried and lands', async () => {
    const rig = await outageRig();
    const once = await createOncely({ store: rig.store(), defaults: { lease: '5s' } });
    let runs = 0;
    let outage: Promise<void> = Promise.resolve();
    const charge = () =>
      once.run({ action: 'charge', key: 'O-1' }, async () => {
        runs++;
        // The database goes away for half a second right after the effect, before the completion.
        await rig.down();
        // sleep: the outage lasts half a second, shorter than the completion's retries.
        outage = sleep(500).then(() => rig.up());
        return { charged: runs };
      });
    const first = await charge();
    await outage;
    expect(first).toMatchObject({ replayed: false, value: { charged: 1 } });
    const again = await charge();
    expect(again).toMatchObject({ replayed: true, value: { charged: 1 } });
    // The retried completion's record is the stored one, times included.
    expect(again.record).toEqual(first.record);
    expect(runs).toBe(1);
    await once.close();
    await rig.drop();
  });

  it('defect 11.9: a longer outage at completion is OUTCOME_NOT_STORED carrying the value, never "nothing ran"', async () => {
    const rig = await outageRig();
    const once = await createOncely({ store: rig.store(), defaults: { lease: '5s', completionRetry: 300 } });
    const error = (await once
      .run({ action: 'charge', key: 'O-2' }, async () => {
        await rig.down();
        return { charged: true };
      })
      .catch((e: unknown) => e)) as OncelyError & { value: unknown };
    await rig.up();
    expect(error).toMatchObject({ code: 'OUTCOME_NOT_STORED', value: { charged: true } });
    // The claim still holds: a duplicate is told the key is in progress, not invited to run it again.
    await expect(once.run({ action: 'charge', key: 'O-2' }, async () => 'again')).rejects.toMatchObject({
      code: 'IN_PROGRESS',
    });
    await once.close();
    await rig.drop();
  });

  it("defect 11.5: a terminated backend of a caller's transaction client answers STORE_UNAVAILABLE, never crashes the process, and the next call works", async () => {
    const once = await createOncely({ store: postgresStore({ pool, schema, table: 'terminated' }) });
    const client = await pool.connect();
    await client.query('BEGIN');
    await once.run({ action: 'a', key: 'warm', tx: client }, async () => 1);
    // An EventEmitter with no 'error' listener throws the event: the process would end.
    expect(client.listenerCount('error')).toBeGreaterThan(0);
    const { rows } = await client.query('SELECT pg_backend_pid() AS pid');
    await pool.query('SELECT pg_terminate_backend($1)', [(rows[0] as { pid: number }).pid]);
    // Without the store's listener the client's 'error' event is unhandled and ends the process.
    let runs = 0;
    await expect(once.run({ action: 'a', key: 'k', tx: client }, async () => runs++)).rejects.toMatchObject({
      code: 'STORE_UNAVAILABLE',
    });
    // sleep: a window in which a late run of the refused function would show.
    await sleep(50);
    expect(runs).toBe(0);
    client.release(new Error('terminated'));
    expect(await once.run({ action: 'a', key: 'k' }, async () => 'ok')).toMatchObject({ value: 'ok' });
    await once.close();
  });
});

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
