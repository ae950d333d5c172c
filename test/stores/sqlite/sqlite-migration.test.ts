import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { afterAll, describe, expect, it } from 'vitest';
import { migrate } from '../../../src/db/migrate.js';
import { openSqlite } from '../../../src/db/sqlite.js';
import { createOncely } from '../../../src/index.js';
import { sqliteStore } from '../../../src/sqlite/index.js';
import { listRecords, RECORD_MIGRATIONS } from '../../../src/sqlite/sql.js';

const dir = mkdtempSync(join(tmpdir(), 'oncely-sqlite-v2-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const V1_COLUMNS = `tenant, action, key, state, fingerprint, fence, attempts, lease_until, result, trace_id,
  created_at, updated_at, completed_at, expires_at`;

describe('sqlite records: version 1 to version 2 (settlement, state index)', () => {
  it('a version 1 table with rows gains the settlement column and the state index, and keeps its rows', async () => {
    const path = join(dir, 'v1.db');
    const v1 = await openSqlite(path);
    await migrate(v1, { ...RECORD_MIGRATIONS, steps: RECORD_MIGRATIONS.steps.slice(0, 1) });
    const now = Date.now();
    for (const [key, state, result] of [
      ['ORD-1', 'succeeded', JSON.stringify({ v: { charged: 1 } })],
      ['ORD-2', 'unknown', null],
      ['ORD-3', 'in_progress', null],
    ] as const)
      await v1.run(`INSERT INTO oncely_records (${V1_COLUMNS}) VALUES (?, ?, ?, ?, ?, 1, 1, ?, ?, ?, ?, ?, ?, ?)`, [
        'acme',
        'charge',
        key,
        state,
        'fp',
        state === 'in_progress' ? now + 60_000 : null,
        result,
        `trace-${key}`,
        now - 1_000,
        now - 1_000,
        state === 'succeeded' ? now - 1_000 : null,
        state === 'unknown' ? null : now + 3_600_000,
      ]);
    expect((await v1.all<{ name: string }>('PRAGMA table_info(oncely_records)')).map((c) => c.name)).not.toContain(
      'settlement',
    );
    await v1.close();

    const store = sqliteStore({ path });
    const once = await createOncely({ store, tenant: 'acme' });
    // The rows are read as they were, with no settlement field at all.
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
    await store.close();

    const db = new Database(path);
    expect(db.prepare('SELECT component, version FROM oncely_component_migrations ORDER BY version').all()).toEqual([
      { component: 'records', version: 1 },
      { component: 'records', version: 2 },
    ]);
    expect(db.prepare('SELECT COUNT(*) AS n FROM oncely_records').get()).toEqual({ n: 3 });
    const stored = db.prepare("SELECT settlement FROM oncely_records WHERE key = 'ORD-2'").get() as {
      settlement: string;
    };
    expect(JSON.parse(stored.settlement)).toEqual(settled.settlement);
    // Listing unknown or in_progress records is a range of the state index from the cursor on, with
    // or without a tenant, never a scan; the index holds only those records.
    const planOf = (state: 'unknown' | 'in_progress', tenant: boolean) =>
      (
        db
          .prepare(
            `EXPLAIN QUERY PLAN ${listRecords({ state, tenant, action: false, updatedBefore: false, after: tenant ? ['action', 'key'] : ['tenant', 'action', 'key'] })}`,
          )
          .all({ tenant: 'acme', c_tenant: 'a', c_action: 'b', c_key: 'c', limit: 10 }) as { detail: string }[]
      )
        .map((p) => p.detail)
        .join('\n');
    expect(planOf('unknown', false)).toMatch(
      /USING INDEX oncely_records_state \(state=\? AND \(tenant,action,key\)>\(\?,\?,\?\)\)/,
    );
    expect(planOf('in_progress', true)).toMatch(
      /USING INDEX oncely_records_state \(state=\? AND tenant=\? AND \(action,key\)>\(\?,\?\)\)/,
    );
    const indexed = db
      .prepare(
        "SELECT COUNT(*) AS n FROM oncely_records INDEXED BY oncely_records_state WHERE state = 'in_progress' OR state = 'unknown'",
      )
      .get();
    expect(indexed).toEqual({ n: 1 });
    expect(db.prepare("SELECT sql FROM sqlite_master WHERE name = 'oncely_records_state'").get()).toEqual({
      sql: expect.stringMatching(/WHERE state = 'in_progress' OR state = 'unknown'$/),
    });
    db.close();
  });
});
