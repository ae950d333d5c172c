import { existsSync } from 'node:fs';
import type { Command } from 'commander';
import { OncelyError } from '../core/errors.js';
import { appDir, withDir } from './dir.js';

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
    .option('--dry-run', 'count what would be removed; remove nothing')
    .action(async (arg: string | undefined, options: { dir?: string; db?: string; dryRun?: boolean }) => {
      const [{ registerAppLoader }, { openHost }, { purgeText }] = await Promise.all([
        import('./app-loader.js'),
        import('../host/open.js'),
        import('../ops/retention.js'),
      ]);
      // Opening a missing SQLite path would create (and migrate) an empty file: a typo must not leave one behind.
      if (options.db !== undefined && !/^postgres(ql)?:\/\//.test(options.db) && !existsSync(options.db))
        throw new OncelyError('INVALID_ARGUMENT', `no database at ${options.db}`);
      await registerAppLoader();
      const host = await openHost(appDir(arg, options), options.db, { poolSize: 2 });
      try {
        console.log(purgeText(await host.purge({ dryRun: options.dryRun === true })));
      } finally {
        await host.stop();
      }
    });
}
