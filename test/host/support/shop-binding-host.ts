/**
 * One host process of the shop-binding test: orders.fulfil (./shop-binding-app.ts) on the target
 * named by its job, listening on a free port. Prints `{"port":<n>}` once it listens; the test kills
 * it with SIGKILL.
 */
import { startHost } from '../../support/host-app.js';
import { type BindingOptions, bindingApp } from './shop-binding-app.js';

const job = JSON.parse(process.argv[2] as string) as BindingOptions & { target: string };
const running = await startHost(job.target, bindingApp(job), { poolSize: 4 });
console.log(JSON.stringify({ port: Number(new URL(running.base).port) }));
