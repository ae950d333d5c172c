import { execFile } from 'node:child_process';
import { existsSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterEach, describe, expect, it } from 'vitest';
import { openDb } from '../../src/db/index.js';
import { CLI_MAIN } from '../support/cli.js';
import { DATABASES, ids, migratedHost, plant, TABLES } from './retention-fixture.js';

const run = promisify(execFile);
const CLI = [CLI_MAIN];

/** An app folder whose config keeps dead letters a day, so the CLI shows it reads the app's retentions. */
function appFolder(): string {
  const dir = mkdtempSync(join(tmpdir(), 'oncely-purge-'));
  writeFileSync(join(dir, 'package.json'), '{ "type": "module" }\n');
  writeFileSync(join(dir, 'oncely.config.ts'), "export default { retention: { deadLetters: '1d' } };\n");
  return dir;
}

/** `table  would remove N` / `table  removed N` lines as a map. */
const perTable = (stdout: string): Record<string, number> =>
  Object.fromEntries(
    [...stdout.matchAll(/^(oncely_\w+)\s+(?:would remove|removed) (\d+)$/gm)].map((m) => [m[1], Number(m[2])]),
  );

describe('oncely purge', () => {
  it('refuses a SQLite path with no database, and leaves no file behind', async () => {
    const missing = join(mkdtempSync(join(tmpdir(), 'oncely-purge-')), 'typo.db');
    await expect(run(process.execPath, [...CLI, 'purge', appFolder(), '--db', missing])).rejects.toMatchObject({
      stderr: expect.stringContaining(`oncely: no database at ${missing}`),
    });
    expect(existsSync(missing)).toBe(false);
  }, 60_000);
});

for (const database of DATABASES) {
  describe(`oncely purge on ${database.name}`, () => {
    const cleanups: (() => Promise<void>)[] = [];
    afterEach(async () => {
      for (const c of cleanups.splice(0).reverse()) await c();
    });

    it('--dry-run prints what would go and removes nothing; without it, removes exactly that', async () => {
      const { target, cleanup } = database.fresh();
      cleanups.push(cleanup);
      const { host, db } = await migratedHost(target);
      const planted = await plant(host, db);
      await host.stop();
      const dir = appFolder();
      const expected: Record<string, number> = {};
      for (const [table, p] of Object.entries(planted)) if (p.purged.length > 0) expected[table] = p.purged.length;
      // The app's deadLetters '1d': the old dead event, the old dead outbox row and the old failed
      // flow (with its two steps and its signal) go too.
      expected.oncely_events = (expected.oncely_events ?? 0) + 1;
      expected.oncely_outbox = (expected.oncely_outbox ?? 0) + 1;
      expected.oncely_flows = (expected.oncely_flows ?? 0) + 1;
      expected.oncely_flow_steps = (expected.oncely_flow_steps ?? 0) + 2;
      expected.oncely_flow_signals = (expected.oncely_flow_signals ?? 0) + 1;

      const reader = await openDb(target, { poolSize: 1 });
      cleanups.push(() => reader.close());
      const snapshot = async () =>
        Object.fromEntries(await Promise.all(TABLES.map(async (t) => [t, await ids(reader, t)] as const)));
      const before = await snapshot();

      const dry = await run(process.execPath, [...CLI, 'purge', dir, '--db', target, '--dry-run']);
      const total = Object.values(expected).reduce((a, b) => a + b, 0);
      expect(dry.stdout).toContain(`dry run: nothing removed; would remove ${total} row(s) in all`);
      expect(Object.fromEntries(Object.entries(perTable(dry.stdout)).filter(([, n]) => n > 0))).toEqual(expected);
      expect(await snapshot()).toEqual(before);

      const real = await run(process.execPath, [...CLI, 'purge', '--dir', dir, '--db', target]);
      expect(real.stdout).toContain(`removed ${total} row(s) in all`);
      expect(Object.fromEntries(Object.entries(perTable(real.stdout)).filter(([, n]) => n > 0))).toEqual(expected);
      const after = await snapshot();
      for (const table of TABLES) {
        const kept = (planted[table]?.kept ?? []).filter((id) => id !== 'dead-old' && !id.startsWith('failed-old'));
        expect(after[table], table).toEqual([...kept].sort());
      }
    }, 60_000);

    it('a bad retention in the app config is CONFIG_INVALID before anything is removed', async () => {
      const { target, cleanup } = database.fresh();
      cleanups.push(cleanup);
      const dir = appFolder();
      writeFileSync(join(dir, 'oncely.config.ts'), "export default { retention: { events: 'a month' } };\n");
      await (await openDb(target)).close();
      await expect(run(process.execPath, [...CLI, 'purge', dir, '--db', target])).rejects.toMatchObject({
        stderr: expect.stringContaining('retention.events'),
      });
    }, 60_000);

    it('review3.10: --dry-run on a database at an older version, with a changed schema.sql, changes nothing', async () => {
      const { target, cleanup } = database.fresh();
      cleanups.push(cleanup);
      const { host, db } = await migratedHost(target);
      const planted = await plant(host, db);
      await host.stop();
      // As an older oncely left it: no dashboard component (its samples table and ledger row).
      const old = await openDb(target, { poolSize: 1 });
      cleanups.push(() => old.close());
      await old.run('DROP TABLE oncely_stats_samples');
      await old.run("DELETE FROM oncely_component_migrations WHERE component = 'dashboard'");
      // And an app whose schema.sql changed since its last start.
      const dir = appFolder();
      writeFileSync(join(dir, 'schema.sql'), 'CREATE TABLE review_notes (id TEXT PRIMARY KEY);\n');

      /** The database's tables, columns, indexes and migration ledgers, as text. */
      const layout = async () => {
        const objects =
          old.dialect === 'sqlite'
            ? await old.all(
                "SELECT type, name, tbl_name, sql FROM sqlite_master WHERE name NOT LIKE 'sqlite_%' ORDER BY name",
              )
            : [
                ...(await old.all(
                  `SELECT table_name, column_name, data_type, column_default, is_nullable FROM information_schema.columns
                   WHERE table_schema = current_schema() ORDER BY table_name, column_name`,
                )),
                ...(await old.all(
                  'SELECT tablename, indexname, indexdef FROM pg_indexes WHERE schemaname = current_schema() ORDER BY indexname',
                )),
              ];
        const ledger = await old.all(
          'SELECT component, version, applied_at FROM oncely_component_migrations ORDER BY component, version',
        );
        const schemas = await old.all('SELECT hash, applied_at FROM oncely_app_schema ORDER BY hash');
        return JSON.stringify({ objects, ledger, schemas });
      };
      const before = await layout();
      expect(before).not.toContain('review_notes');
      expect(before).not.toContain('oncely_stats_samples');

      const dry = await run(process.execPath, [...CLI, 'purge', dir, '--db', target, '--dry-run']);
      expect(await layout()).toBe(before);
      // It still counts what a purge would remove.
      const counted = perTable(dry.stdout);
      for (const [table, p] of Object.entries(planted))
        if (p.purged.length > 0) expect(counted[table], table).toBeGreaterThanOrEqual(p.purged.length);
      expect(dry.stdout).toMatch(/dry run: nothing removed; would remove [1-9]\d* row\(s\) in all/);

      // The purge itself migrates first: the table comes back, and the new schema is applied.
      await run(process.execPath, [...CLI, 'purge', dir, '--db', target]);
      const after = await layout();
      expect(after).toContain('oncely_stats_samples');
      expect(after).toContain('review_notes');
    }, 60_000);
  });
}
