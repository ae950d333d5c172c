import { existsSync } from 'node:fs';
import { join } from 'node:path';
import type { Command } from 'commander';
import { OncelyError } from '../core/errors.js';
import type { PurgeReport } from '../ops/retention.js';
import { appDir, withDir } from './dir.js';

const POSTGRES_URL = /^postgres(ql)?:\/\//;

/**
 * Adds `oncely purge [dir] [--db] [--dry-run]`: one retention pass with the app's retentions,
 * printing per table what it removed (or, with --dry-run, would remove).
 */
export function addPurgeCommand(program: Command): void {
  withDir(
    program
      .command('purge')
      .description("remove finished rows past their retention (the app config's, else the defaults), per table"),
  )
    .argument('[dir]', 'app folder (default: .)')
    .option('--db <target>', 'SQLite file or postgres:// URL (default: the app config, else <dir>/.oncely/app.db)')
    .option('--dry-run', 'count what would be removed; change nothing, not even a migration')
    .action(async (arg: string | undefined, options: { dir?: string; db?: string; dryRun?: boolean }) => {
      const [{ registerAppLoader }, { openHost }, { purgeText }] = await Promise.all([
        import('./app-loader.js'),
        import('../host/open.js'),
        import('../ops/retention.js'),
      ]);
      // Opening a missing SQLite path would create (and migrate) an empty file: a typo must not leave one behind.
      if (options.db !== undefined) mustExist(options.db);
      await registerAppLoader();
      const dir = appDir(arg, options);
      if (options.dryRun === true) {
        console.log(purgeText(await dryRun(dir, options.db)));
        return;
      }
      const host = await openHost(dir, options.db, { poolSize: 2 });
      try {
        console.log(purgeText(await host.purge()));
      } finally {
        await host.stop();
      }
    });
}

/**
 * A dry run without the host: opening the host migrates oncely's tables and applies a changed
 * schema.sql, and a dry run changes nothing. It reads the app's config (its retentions and
 * database) and counts on the tables as the database has them; a table an older version of oncely
 * did not make is left out, and a count that needs what only migrating adds is NOT_MIGRATED.
 */
async function dryRun(dir: string, target: string | undefined): Promise<PurgeReport> {
  const [{ loadApp }, { openDb }, { recordStoreFor }, { purge, retentionSettings }] = await Promise.all([
    import('../host/app.js'),
    import('../db/index.js'),
    import('../host/records.js'),
    import('../ops/retention.js'),
  ]);
  const app = await loadApp(dir).catch((error: unknown) => {
    throw new OncelyError('CONFIG_INVALID', `cannot load the app in ${dir}: ${messageOf(error)}`, { cause: error });
  });
  const settings = retentionSettings(app.config.retention);
  const database = target ?? app.config.db ?? join(app.dir, '.oncely', 'app.db');
  mustExist(database);
  const db = await openDb(database, { poolSize: 1 });
  try {
    // The store only tells purge that records are kept here: a dry run counts them with SQL, never through it.
    return await purge(db, settings, { dryRun: true, records: recordStoreFor(db) });
  } catch (error) {
    if (OncelyError.is(error)) throw error;
    throw new OncelyError(
      'NOT_MIGRATED',
      `cannot count what a purge would remove without migrating ${database} first (${messageOf(error)}); oncely purge without --dry-run migrates it, then purges`,
      { cause: error },
    );
  } finally {
    await db.close();
  }
}

function mustExist(target: string): void {
  if (!POSTGRES_URL.test(target) && !existsSync(target))
    throw new OncelyError('INVALID_ARGUMENT', `no database at ${target}`);
}

function messageOf(error: unknown): string {
  return (error instanceof Error ? error.message : String(error)).trim().replace(/\s*\n\s*/g, ' ');
}
