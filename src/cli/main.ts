#!/usr/bin/env node
import { readFileSync } from 'node:fs';
import { Command } from 'commander';
import { appDir, withDir } from './dir.js';
import { addFlowCommands } from './flows.js';
import { addHostCommands } from './host-commands.js';
import { addPurgeCommand } from './purge.js';
import { addReconcileCommand } from './reconcile.js';
import { addRecordCommands } from './records.js';

// Every command imports its modules inside its action: `oncely demo` or `--help` must not load the
// host (hono, tsx), so each command works with exactly what it needs installed.
const pkg = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { version: string };
const program = new Command('oncely').description('Side effects that happen once in effect.').version(pkg.version);

program
  .command('demo')
  .description('deliver one "order paid" webhook three times to a handler on embedded SQLite; one SMS is sent')
  .option('--db <path>', 'SQLite file for the demo (recreated)', '.oncely/demo.db')
  .action(async (options: { db: string }) => {
    const { runDemo } = await import('./demo.js');
    const report = await runDemo(options.db, (line) => console.log(line));
    if (report.smsSent !== 1) process.exitCode = 1;
  });

withDir(
  program
    .command('init')
    .description(
      'scaffold an app (config, schema.sql, a handler, a webhook source and its consumer, a README) and install what serve needs',
    )
    .argument('[dir]', 'app folder to create (default: .)')
    .option('--no-install', 'print the command that installs what `oncely serve` needs instead of running it'),
).action(async (dir: string | undefined, options: { dir?: string; install: boolean }) => {
  const [{ initApp }, { installHostPackages }] = await Promise.all([import('./init.js'), import('./host-packages.js')]);
  const target = appDir(dir, options);
  for (const file of initApp(target)) console.log(`created ${file}`);
  await installHostPackages(process.cwd(), options.install, (line) => console.log(line));
  console.log(`next: npx oncely serve ${target}  (then read ${target}/README.md for requests to try)`);
});

addHostCommands(program);
addFlowCommands(program);
addPurgeCommand(program);
addReconcileCommand(program);
addRecordCommands(program);

program.parseAsync().catch((error: unknown) => {
  // One line a user can act on; the stack is for `ONCELY_DEBUG=1`.
  if (process.env.ONCELY_DEBUG === '1') console.error(error);
  else
    console.error(
      `oncely: ${(error instanceof Error ? error.message : String(error)).trim().replace(/\s*\n\s*/g, ' ')}`,
    );
  process.exitCode = 1;
});
