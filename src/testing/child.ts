/**
 * The child process of oncely/testing's cross-process storms and crash windows. It imports the
 * user's module, takes the named export (a function of `(input, caller)`), and by `mode`:
 * - calls: prints "oncely:ready", waits for a line on stdin, makes `calls` concurrent calls and
 *   prints "oncely:result" with their outcomes as JSON.
 * - once: one call (a crash test's first attempt: its hooks kill the process at the window; at
 *   'completed', once the call has returned, before its outcome is printed).
 * - retry: calls while the answer is IN_PROGRESS (a lease still running), for up to `retryForMs`.
 */
import { createInterface } from 'node:readline';
import { pathToFileURL } from 'node:url';
import { crashIfDeferred, deferCompletedCrash } from './crash-hooks.js';
import { type CallerOutcome, outcomeOf, READY_LINE, RESULT_LINE } from './outcome.js';
import type { ChildJob } from './spawn.js';

const job = JSON.parse(process.argv[2] ?? '{}') as ChildJob;
const loaded = (await import(pathToFileURL(job.module).href)) as Record<string, unknown>;
const fn = loaded[job.export];
if (typeof fn !== 'function') throw new Error(`${job.module} has no function export ${job.export}`);
const call = (caller: number) => Promise.resolve().then(() => fn(job.input, { caller, process: job.process ?? 0 }));
const phase = `process ${job.process ?? 0}`;
const first = job.firstCaller ?? 0;
let outcomes: CallerOutcome[];

if (job.mode === 'calls') {
  const lines = createInterface({ input: process.stdin });
  console.log(READY_LINE);
  await new Promise<void>((resolve) => lines.once('line', () => resolve()));
  lines.close();
  const settled = await Promise.allSettled(Array.from({ length: job.calls ?? 1 }, (_, i) => call(first + i)));
  outcomes = settled.map((s, i) => outcomeOf(first + i, phase, s));
} else if (job.mode === 'once') {
  deferCompletedCrash();
  const [settled] = await Promise.allSettled([call(first)]);
  crashIfDeferred();
  outcomes = [outcomeOf(first, phase, settled as PromiseSettledResult<unknown>)];
} else {
  const end = performance.now() + (job.retryForMs ?? 10_000);
  let outcome: CallerOutcome;
  for (;;) {
    const [settled] = await Promise.allSettled([call(first)]);
    outcome = outcomeOf(first, phase, settled as PromiseSettledResult<unknown>);
    if (outcome.code !== 'IN_PROGRESS' || performance.now() > end) break;
    await new Promise((r) => setTimeout(r, 100));
  }
  outcomes = [outcome];
}
console.log(`${RESULT_LINE} ${JSON.stringify(outcomes)}`);
// The user's module may hold connections open (a host, a pool): the answer is out, so leave.
process.exit(0);
