import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { afterAll, describe, expect, it } from 'vitest';
import { createOncely } from '../../src/engine/engine.js';
import { postgresStore } from '../../src/postgres/index.js';
import { sqliteStore } from '../../src/sqlite/index.js';
import type { RecordStore } from '../../src/store.js';
import { dropSchema, freshSchema, testPool } from '../support/postgres.js';
import { TODAYS_SQLITE_RECORDS, todaysPostgresRecords } from './support/todays-record-ddl.js';

const KEYS = ['order-1', 'order-2'];

/** Runs each key once on `store`: the records the database under it is then given. */
async function runAll(store: RecordStore, fn: (key: string) => unknown) {
  const once = await createOncely({ store, tenant: 'acme' });
  const results = [];
  for (const key of KEYS) results.push(await once.run({ action: 'charge', key, input: { key } }, () => fn(key)));
  await once.close();
  return results;
}

const refuse = () => {
  throw new Error('a record kept across the migration must replay, not run again');
};

describe('record stores: a database made before the one migration convention', () => {
  const dir = mkdtempSync(join(tmpdir(), 'oncely-records-migration-'));
  const schemas: string[] = [];
  const pool = testPool(4);
  afterAll(async () => {
    rmSync(dir, { recursive: true, force: true });
    await pool.end();
    for (const schema of schemas) await dropSchema(schema);
  });

  it('SQLite: its records replay, and its ledger is carried into oncely_component_migrations', async () => {
    // Records as today's code stores them, written into a file made by today's DDL and ledger.
    const scratch = new Database(':memory:');
    await runAll(sqliteStore({ database: scratch }), (key) => ({ charged: key }));
    const rows = scratch.prepare('SELECT * FROM oncely_records').all() as Record<string, unknown>[];
    scratch.close();
    const path = join(dir, 'old.db');
    const old = new Database(path);
    for (const statement of TODAYS_SQLITE_RECORDS) old.exec(statement);
    const insert = old.prepare(
      `INSERT INTO oncely_records VALUES (@tenant, @action, @key, @state, @fingerprint, @fence, @attempts,
        @lease_until, @result, @trace_id, @created_at, @updated_at, @completed_at, @expires_at)`,
    );
    for (const row of rows) insert.run(row);
    old.close();

    const replays = await runAll(sqliteStore({ path }), refuse);
    expect(replays.map((r) => [r.replayed, r.value])).toEqual(KEYS.map((key) => [true, { charged: key }]));
    const opened = new Database(path);
    expect(opened.prepare('SELECT component, version FROM oncely_component_migrations ORDER BY version').all()).toEqual(
      [
        { component: 'records', version: 1 },
        { component: 'records', version: 2 },
      ],
    );
    expect(opened.prepare('SELECT COUNT(*) AS n FROM oncely_records').get()).toEqual({ n: KEYS.length });
    opened.close();
  });

  it('PostgreSQL: its records replay, and its ledger is carried into oncely_component_migrations', async () => {
    const scratch = freshSchema();
    const schema = freshSchema();
    schemas.push(scratch, schema);
    await runAll(postgresStore({ pool, schema: scratch }), (key) => ({ charged: key }));
    for (const statement of todaysPostgresRecords(schema)) await pool.query(statement);
    // Today's columns alone: today's table has no settlement.
    const columns = (await pool.query(`SELECT * FROM "${schema}".records LIMIT 0`)).fields
      .map((f) => f.name)
      .join(', ');
    await pool.query(`INSERT INTO "${schema}".records SELECT ${columns} FROM "${scratch}".records`);

    const replays = await runAll(postgresStore({ pool, schema }), refuse);
    expect(replays.map((r) => [r.replayed, r.value])).toEqual(KEYS.map((key) => [true, { charged: key }]));
    const { rows } = await pool.query(
      `SELECT component, version FROM "${schema}".oncely_component_migrations ORDER BY version`,
    );
    expect(rows).toEqual([
      { component: 'records', version: 1 },
      { component: 'records', version: 2 },
    ]);
    const count = await pool.query(`SELECT COUNT(*)::int AS n FROM "${schema}".records`);
    expect(count.rows).toEqual([{ n: KEYS.length }]);
  });
});
