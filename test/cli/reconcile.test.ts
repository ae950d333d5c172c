/**
 * `oncely reconcile [dir] [--db]` from the sources, on SQLite and PostgreSQL: one pass with the
 * app folder's reconcile exports, what it prints (text and --json), the records it settles, those
 * it leaves for a person, and bad arguments refused.
 */
import { execFile } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, describe, expect, it } from 'vitest';
import type { StoredRecord } from '../../src/core/record.js';
import type { RecordStore } from '../../src/index.js';
import { postgresStore } from '../../src/postgres/index.js';
import { sqliteStore } from '../../src/sqlite/index.js';
import { CLI_MAIN } from '../support/cli.js';
import { dropSchema, freshSchema, POSTGRES_URL } from '../support/postgres.js';
import { type StoreName, selectStores } from '../support/store-filter.js';

const run = promisify(execFile);
const CLI = [CLI_MAIN];

function appFolder(): string {
  const dir = mkdtempSync(join(tmpdir(), 'oncely-reconcile-cli-'));
  const files: Record<string, string> = {
    'package.json': '{ "type": "module" }\n',
    'oncely.config.ts': 'export default { reconcile: false };\n',
    // The gateway knows ORD-1 (charged) and nothing of ORD-2.
    'handlers/orders/charge.ts': `export function handle() { return { charged: true }; }
export async function reconcile(record: { key: string }) {
  return record.key === 'ORD-1' ? { value: { chargeId: 'ch_1' } } : 'retry';
}\n`,
    'handlers/orders/refund.ts': 'export function handle() { return {}; }\n',
  };
  for (const [name, text] of Object.entries(files)) {
    mkdirSync(join(dir, name, '..'), { recursive: true });
    writeFileSync(join(dir, name), text);
  }
  return dir;
}

function unknownRecord(action: string, key: string): StoredRecord {
  const at = Date.now() - 600_000;
  return {
    tenant: 'default',
    action,
    key,
    state: 'unknown',
    fingerprint: 'x',
    fence: 2,
    attempts: 1,
    leaseUntil: null,
    result: null,
    traceId: randomUUID(),
    createdAt: at,
    updatedAt: at,
    completedAt: null,
    expiresAt: null,
  };
}

const schema = freshSchema();
/** The databases ONCELY_STORES selects. */
const targets = selectStores<{ name: StoreName; db: (dir: string) => string; store: (db: string) => RecordStore }>([
  { name: 'sqlite', db: (dir) => join(dir, 'app.db'), store: (db) => sqliteStore({ path: db }) },
  {
    name: 'postgres',
    db: () => `${POSTGRES_URL}?schema=${schema}`,
    store: () => postgresStore({ connectionString: POSTGRES_URL, schema, table: 'oncely_records' }),
  },
]);

describe('oncely reconcile', () => {
  afterAll(() => dropSchema(schema));

  for (const target of targets)
    it(`settles with the app's reconcile and lists what waits for a person (${target.name})`, async () => {
      const dir = appFolder();
      const db = target.db(dir);
      await run(process.execPath, [...CLI, 'migrate', dir, '--db', db]);
      const store = target.store(db);
      try {
        for (const [action, key] of [
          ['POST orders.charge', 'ORD-1'],
          ['POST orders.charge', 'ORD-2'],
          ['POST orders.refund', 'RF-1'],
        ] as const)
          await store.insertOrGet(unknownRecord(action, key));
        const { stdout } = await run(process.execPath, [...CLI, 'reconcile', dir, '--db', db]);
        expect(stdout.trim().split('\n')).toEqual([
          'settled 2, unknown 0, failed 0, skipped 0',
          'settled  value  default/POST%20orders.charge/ORD-1',
          'settled  retry  default/POST%20orders.charge/ORD-2',
          'awaiting a person       1  unknown      POST orders.refund',
        ]);
        const id = (key: string) => ({ tenant: 'default', action: 'POST orders.charge', key });
        expect(await store.get(id('ORD-1'))).toMatchObject({
          state: 'succeeded',
          settlement: { by: 'reconciler', answer: 'value' },
        });
        expect(await store.get(id('ORD-2'))).toMatchObject({ state: 'released', settlement: { answer: 'retry' } });

        const json = await run(process.execPath, [...CLI, 'reconcile', '--dir', dir, '--db', db, '--json']);
        expect(JSON.parse(json.stdout)).toEqual({
          settled: [],
          unknown: 0,
          failed: 0,
          skipped: 0,
          awaiting: [{ action: 'POST orders.refund', state: 'unknown', count: 1 }],
        });
        // Records younger than --older-than are not looked at.
        const young = await run(process.execPath, [...CLI, 'reconcile', dir, '--db', db, '--older-than', '1h']);
        expect(young.stdout.trim().split('\n')).toEqual([
          'settled 0, unknown 0, failed 0, skipped 0',
          'awaiting a person: none',
        ]);
        await expect(
          run(process.execPath, [...CLI, 'reconcile', dir, '--db', db, '--limit', 'many']),
        ).rejects.toMatchObject({ stderr: expect.stringContaining('--limit many is not a whole number') });
      } finally {
        await store.close();
      }
    });
});
