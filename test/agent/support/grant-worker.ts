/**
 * A separate process that grants credits, driven by test/agent/credits.test.ts: prints "ready",
 * waits for "go" on stdin, grants `credits` to `account` with `key` `times` times side by side,
 * and prints a JSON line of what each grant answered (the balance, or the error's code).
 * Job (argv[2]): { target: a SQLite path or a postgres URL with ?schema=, account, credits, key, times }.
 */
import { createInterface } from 'node:readline';
import { Credits } from '../../../src/agent/credits.js';
import { migrateAgentTables } from '../../../src/agent/tables.js';
import { openDb } from '../../../src/db/index.js';

const job = JSON.parse(process.argv[2] as string) as {
  target: string;
  account: string;
  credits: number;
  key: string;
  times: number;
};
const db = await openDb(job.target);
await migrateAgentTables(db);
const credits = new Credits(db);
console.log('ready');
for await (const line of createInterface({ input: process.stdin })) if (line === 'go') break;
const answers = await Promise.all(
  Array.from({ length: job.times }, () =>
    credits.grant(job.account, job.credits, { key: job.key }).catch((error: { code?: string }) => error.code),
  ),
);
console.log(JSON.stringify(answers));
await db.close();
