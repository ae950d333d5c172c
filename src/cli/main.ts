#!/usr/bin/env node
import { Command } from 'commander';
import { runDemo } from './demo.js';
import { addFlowCommands, addHostCommands } from './host-commands.js';

const program = new Command('oncely').description('Side effects that happen once in effect.');

program
  .command('demo')
  .description('deliver one "order paid" webhook three times to a handler on embedded SQLite; one SMS is sent')
  .option('--db <path>', 'SQLite file for the demo (recreated)', '.oncely/demo.db')
  .action(async (options: { db: string }) => {
    const report = await runDemo(options.db, (line) => console.log(line));
    if (report.smsSent !== 1) process.exitCode = 1;
  });

addHostCommands(program);
addFlowCommands(program);

program.parseAsync().catch((error: unknown) => {
  console.error(error instanceof Error ? `${error.name}: ${error.message}` : error);
  process.exitCode = 1;
});
