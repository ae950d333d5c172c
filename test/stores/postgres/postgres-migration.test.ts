import { afterAll, describe, expect, it } from 'vitest';
import { migrate } from '../../../src/db/migrate.js';
import { connectionDb } from '../../../src/db/postgres.js';
import { createOncely } from '../../../src/index.js';
import { postgresStore } from '../../../src/postgres/index.js';
import { names, recordMigrations } from '../../../src/postgres/sql.js';
import { dropSchema, freshSchema, testPool } from '../../support/postgres.js';

const pool = testPool(4);
const schema = freshSchema();
afterAll(async () => {
  await pool.end();
  await dropSchema(schema);
});

describe('postgres records: version 1 to version 2 (settlement, state index)', () => {
  it('a version 1 table with rows gains the settlement column and the state index, and keeps its rows', async () => {
    const n = names(schema, 'oncely_records');
    const client = await pool.connect();
    await client.query(`CREATE SCHEMA "${schema}"`);
    await client.query(`SET search_path TO "${schema}"`);
    const v2 = recordMigrations(n);
    await migrate(connectionDb(client, schema), { ...v2, steps: v2.steps.slice(0, 1) });
    const now = Date.now();
    for (const [key, state] of [
      ['ORD-1', 'succeeded'],
      ['ORD-2', 'unknown'],
      ['ORD-3', 'in_progress'],
    ] as const)
      await client.query(
        `INSERT INTO ${n.records} (tenant, action, key, state, fingerprint, fence, attempts, lease_until, result,
          trace_id, created_at, updated_at, completed_at, expires_at)
         VALUES ('acme', 'charge', $1, $2, 'fp', 1, 1, $3, $4, $5, $6, $6, $7, $8)`,
        [
          key,
          state,
          state === 'in_progress' ? now + 60_000 : null,
          state === 'succeeded' ? JSON.stringify({ v: { charged: 1 } }) : null,
          `trace-${key}`,
          now - 1_000,
          state === 'succeeded' ? now - 1_000 : null,
          state === 'unknown' ? null : now + 3_600_000,
        ],
      );
    const columns = async () =>
      (
        await pool.query(
          'SELECT column_name FROM information_schema.columns WHERE table_schema = $1 AND table_name = $2',
          [schema, 'oncely_records'],
        )
      ).rows.map((r) => r.column_name);
    expect(await columns()).not.toContain('settlement');
    // The connection carries the schema's search path: never given back to the pool.
    client.release(true);

    const store = postgresStore({ pool, schema, table: 'oncely_records' });
    const once = await createOncely({ store, tenant: 'acme' });
    const paid = await once.get('charge', 'ORD-1');
    expect(paid).toMatchObject({ state: 'succeeded', traceId: 'trace-ORD-1', createdAt: now - 1_000 });
    expect(paid).not.toHaveProperty('settlement');
    expect((await once.list({ limit: 10 })).records.map((r) => [r.key, r.state])).toEqual([
      ['ORD-1', 'succeeded'],
      ['ORD-2', 'unknown'],
      ['ORD-3', 'in_progress'],
    ]);
    const settled = await once.resolve('charge', 'ORD-2', { value: { charged: 2 } }, { by: 'carol', note: 'PSP 9' });
    expect(settled.settlement).toMatchObject({ by: 'carol', answer: 'value', note: 'PSP 9' });
    await once.close();

    expect(await columns()).toContain('settlement');
    const ledger = await pool.query(
      `SELECT component, version FROM "${schema}".oncely_component_migrations ORDER BY version`,
    );
    expect(ledger.rows).toEqual([
      { component: 'records:oncely_records', version: 1 },
      { component: 'records:oncely_records', version: 2 },
    ]);
    const stored = await pool.query(
      `SELECT settlement, (SELECT COUNT(*)::int FROM ${n.records}) AS n FROM ${n.records} WHERE key = 'ORD-2'`,
    );
    expect(stored.rows).toEqual([{ settlement: settled.settlement, n: 3 }]);
    const index = await pool.query('SELECT indexdef FROM pg_indexes WHERE schemaname = $1 AND indexname = $2', [
      schema,
      'oncely_records_state',
    ]);
    // Partial: finished records leave it.
    expect(index.rows[0]?.indexdef).toMatch(
      /\(state, tenant, action, key\) WHERE \(state = ANY \(ARRAY\['in_progress'::text, 'unknown'::text\]\)\)$/,
    );
  });
});
