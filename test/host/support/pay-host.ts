/**
 * One host process of the external-effects tests: the pay app (./pay-app.ts) on the target named
 * by its job (a SQLite file or a PostgreSQL schema), listening on a free port. Prints `{"port":<n>}`
 * once it listens; the test kills it with SIGKILL.
 */
import { startHost } from '../../support/host-app.js';
import { type PayOptions, payApp } from './pay-app.js';

const job = JSON.parse(process.argv[2] as string) as PayOptions & { target: string };
const running = await startHost(job.target, payApp(job), { poolSize: 4 });
console.log(JSON.stringify({ port: Number(new URL(running.base).port) }));
