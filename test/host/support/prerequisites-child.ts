/**
 * A host of the prerequisite tests' shop in its own process: argv[2] is `{ target, leaseMs }`. It
 * consumes with a payment check that hangs after printing "checking", and waits to be killed.
 */
import { startHost } from '../../support/host-app.js';
import { shop } from './prerequisites-app.js';

const job = JSON.parse(process.argv[2] ?? '{}') as { target: string; leaseMs: number };
await startHost(job.target, shop('1m', new Map(), { hangInRequires: true, leaseMs: job.leaseMs }));
console.log('ready');
