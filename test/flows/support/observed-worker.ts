/**
 * A flow worker for the observability test: it runs the crash flow of `tag` with a short lease,
 * prints `hanging` once its last step is entered, and hangs there until it is killed (SIGKILL).
 */
import { openDb } from '../../../src/db/index.js';
import { createFlows } from '../../../src/flows/index.js';
import { crashFlow } from './observed-flow.js';

const job = JSON.parse(process.argv[2] ?? '{}') as { target: string; tag: string; lease: number };
const db = await openDb(job.target);
const flow = crashFlow(job.tag, () => {
  console.log('hanging');
  return new Promise<string>(() => {});
});
const flows = await createFlows({ db, flows: [flow], lease: job.lease, poll: '20ms', metrics: false });
await flows.startWorker();
console.log('ready');
