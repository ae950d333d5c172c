/**
 * A live writer in its own process, beside a purge in the test's: an event intake, then a claim
 * of one pending event, over and over, timing each. Job: `{ target }` (a SQLite path or a
 * postgres:// URL). Prints "ready"; on "report" prints `{ intakes, claims, maxIntakeMs,
 * maxClaimMs, p99Ms }` for the operations since the last report and starts counting afresh; exits on "stop".
 */
import { createInterface } from 'node:readline';
import { openDb } from '../../src/db/index.js';
import { claimable, EVENT_WORK } from '../../src/host/event-sql.js';
import { EventQueue } from '../../src/host/events.js';
import { WorkQueue } from '../../src/work/index.js';

const job = JSON.parse(process.argv[2] ?? '{}') as { target: string };
const db = await openDb(job.target, { poolSize: 2 });
const events = new EventQueue(db, { consumerFor: () => undefined });
const work = new WorkQueue(db, EVENT_WORK, { leaseMs: 600_000 });

let intakes: number[] = [];
let claims: number[] = [];
let stopping = false;
const loop = (async () => {
  for (let i = 0; !stopping; i++) {
    const started = performance.now();
    await events.intake('live', `w-${process.pid}-${i}`, 'order.paid', { i });
    const intaken = performance.now();
    await work.claim(1, claimable(Date.now()));
    intakes.push(intaken - started);
    claims.push(performance.now() - intaken);
    // sleep: a steady pace of operations, as a live writer's.
    await new Promise((resolve) => setTimeout(resolve, 2));
  }
})();

createInterface({ input: process.stdin }).on('line', (line) => {
  if (line === 'report') {
    const all = [...intakes, ...claims].sort((a, b) => a - b);
    const round = (ms: number) => Math.round(ms * 10) / 10;
    console.log(
      JSON.stringify({
        intakes: intakes.length,
        claims: claims.length,
        maxIntakeMs: round(Math.max(0, ...intakes)),
        maxClaimMs: round(Math.max(0, ...claims)),
        p99Ms: round(all[Math.floor(all.length * 0.99)] ?? 0),
      }),
    );
    intakes = [];
    claims = [];
  }
  if (line === 'stop') {
    stopping = true;
    void loop.then(async () => {
      await db.close();
      process.exit(0);
    });
  }
});
console.log('ready');
