/**
 * `oncely reconcile --duplicates [dir] --db <target>` on SQLite and PostgreSQL: an app folder with
 * an effect table, rows planted past every key, the CLI prints each finding and what it counted,
 * counts nothing the second time, and `oncely stats --db` shows the interception rate it moved.
 * An effect naming a column the table lacks fails the command with COLUMN_UNKNOWN.
 */
import { execFile } from 'node:child_process';
import { mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, describe, expect, it } from 'vitest';
import { openDb } from '../../src/db/index.js';
import { CLI_MAIN } from '../support/cli.js';
import { dropSchema, freshSchema, POSTGRES_URL } from '../support/postgres.js';
import { selectStores } from '../support/store-filter.js';

const run = promisify(execFile);
const CLI = [CLI_MAIN];

function appDir(by: string[]): string {
  const dir = mkdtempSync(join(tmpdir(), 'oncely-dup-cli-'));
  const files: Record<string, string> = {
    'package.json': '{ "type": "module" }\n',
    'oncely.config.ts': `export default { effects: [{ table: 'ledger', by: ${JSON.stringify(by)} }] };\n`,
    'schema.sql':
      'CREATE TABLE ledger (id TEXT PRIMARY KEY, order_id TEXT NOT NULL, kind TEXT NOT NULL, created_at BIGINT NOT NULL);\n',
  };
  for (const [name, text] of Object.entries(files)) {
    mkdirSync(join(dir, name, '..'), { recursive: true });
    writeFileSync(join(dir, name), text);
  }
  return dir;
}

const schemas: string[] = [];
afterAll(async () => {
  for (const schema of schemas) await dropSchema(schema);
});

const dialects = selectStores([
  { name: 'sqlite', fresh: () => join(mkdtempSync(join(tmpdir(), 'oncely-dup-cli-db-')), 'app.db') },
  {
    name: 'postgres',
    fresh: () => {
      const schema = freshSchema();
      schemas.push(schema);
      return `${POSTGRES_URL}?schema=${schema}`;
    },
  },
] as const);

for (const dialect of dialects)
  describe(`oncely reconcile --duplicates on ${dialect.name}`, () => {
    it('prints each finding, counts it once, and moves the rate oncely stats prints', async () => {
      const dir = appDir(['orderId', 'kind']);
      const target = dialect.fresh();
      const scan = () => run(process.execPath, [...CLI, 'reconcile', '--duplicates', dir, '--db', target]);
      // The first run migrates the app's tables: nothing to find yet.
      expect((await scan()).stdout).toContain('0 finding(s) in 1 effect table(s); 0 extra row(s) newly counted');

      const db = await openDb(target, { poolSize: 1 });
      try {
        for (const [id, orderId, kind, at] of [
          ['L-1', 'O-1', 'charge', Date.UTC(2026, 0, 1)],
          ['L-2', 'O-1', 'charge', Date.UTC(2026, 0, 2)],
          ['L-3', 'O-1', 'charge', Date.UTC(2026, 0, 3)],
          ['L-4', 'O-2', 'charge', Date.UTC(2026, 0, 4)],
        ] as const)
          await db.run('INSERT INTO ledger (id, order_id, kind, created_at) VALUES (?, ?, ?, ?)', [
            id,
            orderId,
            kind,
            at,
          ]);
      } finally {
        await db.close();
      }

      const { stdout } = await scan();
      const lines = stdout.trim().split('\n');
      expect(lines).toHaveLength(2);
      expect(lines[0]).toMatch(
        /^ledger\t\{"kind":"charge","orderId":"O-1"\}\t3 rows \(2 extra\)\trows created 2026-01-01T00:00:00\.000Z \.\. 2026-01-03T00:00:00\.000Z\tfirst seen \S+\tlast seen \S+$/,
      );
      expect(lines[1]).toBe(
        '1 finding(s) in 1 effect table(s); 2 extra row(s) newly counted as duplicates not intercepted',
      );

      const again = await run(process.execPath, [...CLI, 'reconcile', '--duplicates', dir, '--db', target, '--json']);
      const json = JSON.parse(again.stdout) as { counted: number; findings: { count: number; counted: number }[] };
      expect(json.counted).toBe(0);
      expect(json.findings).toMatchObject([{ count: 3, counted: 2 }]);

      const stats = JSON.parse((await run(process.execPath, [...CLI, 'stats', '--db', target, '--json'])).stdout) as {
        rateTotals: { duplicates: number; duplicatesIntercepted: number };
        rates: { duplicateInterception: { value: number | null } };
      };
      expect(stats.rateTotals).toMatchObject({ duplicates: 2, duplicatesIntercepted: 0 });
      expect(stats.rates.duplicateInterception.value).toBe(0);
    });

    it('fails with COLUMN_UNKNOWN when an effect names a column the table lacks', async () => {
      const dir = appDir(['orderId', 'amount']);
      const failed = await run(process.execPath, [
        ...CLI,
        'reconcile',
        '--duplicates',
        dir,
        '--db',
        dialect.fresh(),
      ]).then(
        () => undefined,
        (error: { code: number; stderr: string }) => error,
      );
      expect(failed?.code).toBe(1);
      expect(failed?.stderr).toContain('table ledger has no column "amount"');
    });
  });
