/**
 * A process that delivers one signal to a flow, for the signal-order test: its clock (Date.now, which
 * the flows' system clock reads) is `skewMs` off, as on a host whose clock is wrong. Prints "ready",
 * waits for a line on stdin, signals, prints "sent" and exits.
 */
import { createInterface } from 'node:readline';
import { openDb } from '../../../src/db/index.js';
import { createFlows } from '../../../src/flows/index.js';

interface Job {
  target: string;
  workflowId: string;
  name: string;
  signalId: string;
  payload: unknown;
  skewMs: number;
}

const job = JSON.parse(process.argv[2] ?? '{}') as Job;
const realNow = Date.now;
Date.now = () => realNow() + job.skewMs;
const db = await openDb(job.target, { poolSize: 1 });
const flows = await createFlows({ db, flows: [], metrics: false });
const lines = createInterface({ input: process.stdin });
console.log('ready');
await new Promise<void>((resolve) => lines.once('line', () => resolve()));
lines.close();
await flows.signal(job.workflowId, job.name, job.payload, { signalId: job.signalId });
console.log('sent');
await flows.close();
