import type { Command } from 'commander';
import type { Duration } from '../core/duration.js';
import { OncelyError } from '../core/errors.js';
import type { ReconcileOptions, ReconcileReport } from '../engine/reconcile.js';
import { appDir, withDir } from './dir.js';

/** The options of `oncely reconcile`, as commander hands them over. */
export interface ReconcileCommandOptions {
  dir?: string;
  db?: string;
  olderThan?: string;
  limit?: string;
  action?: string;
  tenant?: string;
  json?: boolean;
  duplicates?: boolean;
}

/**
 * Adds `oncely reconcile [dir] [--db]`: one pass with the app's reconcile functions over its
 * unknown and stalled records, printing what it settled and what waits for a person. Returns the
 * command, so further options (and what they run) can be added to it.
 */
export function addReconcileCommand(program: Command): Command {
  return withDir(
    program
      .command('reconcile')
      .description(
        "settle unknown and stalled records with the app's reconcile functions; list those left for a person",
      ),
  )
    .argument('[dir]', 'app folder (default: .)')
    .option('--db <target>', 'SQLite file or postgres:// URL (default: the app config, else <dir>/.oncely/app.db)')
    .option(
      '--older-than <duration>',
      "only records last written this long ago, e.g. 10m (default: the config's, else 1m)",
    )
    .option('--limit <n>', "most records asked about (default: the config's, else 100)")
    .option('--action <action>', "only this action's records (a handler's is 'POST <group>.<name>')")
    .option('--tenant <tenant>', "only this tenant's records")
    .option('--json', 'print the report as JSON')
    .option('--duplicates', "instead: scan the config's effect tables for residual duplicates, print each finding")
    .action(async (arg: string | undefined, options: ReconcileCommandOptions) => {
      const pass = passOptions(options);
      const [{ registerAppLoader }, { openHost }] = await Promise.all([
        import('./app-loader.js'),
        import('../host/open.js'),
      ]);
      await registerAppLoader();
      const host = await openHost(appDir(arg, options), options.db, { poolSize: 2 });
      try {
        if (options.duplicates) {
          const { scanText } = await import('../ops/duplicates.js');
          const scan = await host.scanDuplicates();
          console.log(options.json ? JSON.stringify(scan, null, 2) : scanText(scan));
        } else {
          const report = await host.reconcile(pass);
          console.log(options.json ? JSON.stringify(report, null, 2) : reconcileText(report));
        }
      } finally {
        await host.stop();
      }
    });
}

/** The pass's options from the command line; a limit that is no whole number is INVALID_ARGUMENT. */
export function passOptions(options: ReconcileCommandOptions): ReconcileOptions {
  const pass: ReconcileOptions = {};
  if (options.olderThan !== undefined)
    // Bare digits are milliseconds, as everywhere else in oncely.
    pass.olderThan = (/^\d+$/.test(options.olderThan) ? Number(options.olderThan) : options.olderThan) as Duration;
  if (options.limit !== undefined) {
    const limit = Number(options.limit);
    if (!/^\d+$/.test(options.limit) || !Number.isSafeInteger(limit))
      throw new OncelyError('INVALID_ARGUMENT', `--limit ${options.limit} is not a whole number of records`);
    pass.limit = limit;
  }
  if (options.action !== undefined) pass.action = options.action;
  if (options.tenant !== undefined) pass.tenant = options.tenant;
  return pass;
}

/** The report as lines: a summary, each record settled, then each action's records waiting for a person. */
export function reconcileText(report: ReconcileReport): string {
  const lines = [
    `settled ${report.settled.length}, unknown ${report.unknown}, failed ${report.failed}, skipped ${report.skipped}`,
  ];
  for (const { ref, answer } of report.settled) lines.push(`settled  ${answer.padEnd(5)}  ${ref}`);
  for (const { action, state, count } of report.awaiting)
    lines.push(`awaiting a person  ${String(count).padStart(6)}  ${state.padEnd(11)}  ${action}`);
  if (report.awaiting.length === 0) lines.push('awaiting a person: none');
  return lines.join('\n');
}
