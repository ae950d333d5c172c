/**
 * A flow worker process for the chaos test: it runs `chaos-<tag>` flows of 4 steps from the shared
 * database until it is killed (SIGKILL) or asked to stop (SIGTERM: it finishes or suspends the flows
 * in flight, closes the database and exits 0).
 *
 * Every step has a side effect in two tables of the same database, standing in for a downstream:
 * - flow_attempts: one row per execution of a step, no unique key, so repeated executions show;
 * - flow_sink: keyed by the step key, written with ON CONFLICT DO NOTHING, as a downstream that
 *   dedupes on the idempotency key it is given.
 * The effect happens in the middle of the step, so a kill can land before it, or after it and
 * before the step's completion is stored.
 */
import { openDb } from '../../../src/db/index.js';
import { createFlows } from '../../../src/flows/index.js';
import { chaosFlow } from './chaos-flow.js';

interface Job {
  target: string;
  tag: string;
  worker: string;
  lease: number;
  concurrency: number;
  stepMs: number;
}

const job = JSON.parse(process.argv[2] ?? '{}') as Job;
const db = await openDb(job.target);
// sleep: a step takes a random while, so kills land in the middle of steps.
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

const flow = chaosFlow(job.tag, async (key) => {
  // sleep: before the effect, as the step's work.
  await sleep(Math.random() * job.stepMs);
  const now = Date.now();
  await db.run('INSERT INTO flow_attempts (step_key, worker, at) VALUES (?, ?, ?)', [key, job.worker, now]);
  await db.run('INSERT INTO flow_sink (step_key, worker, at) VALUES (?, ?, ?) ON CONFLICT (step_key) DO NOTHING', [
    key,
    job.worker,
    now,
  ]);
  // sleep: after the effect, before the step's result is stored: the window a kill must not double.
  await sleep(Math.random() * job.stepMs);
});

const flows = await createFlows({
  db,
  flows: [flow],
  lease: job.lease,
  concurrency: job.concurrency,
  poll: '50ms',
});
process.once('SIGTERM', () => {
  void flows.close().then(
    () => process.exit(0),
    () => process.exit(1),
  );
});
await flows.startWorker();
console.log('ready');
