/**
 * A worker process on the tests' work_items table. Job (JSON argv): { url, name, mode, leaseMs, batch }.
 * mode 'drain': claims and completes until nothing is due, printing each batch `{"claimed":[...]}`, then `done`.
 * mode 'hold': claims up to `batch`, keeps them renewed, prints `{"claimed":[...]}`, and waits to be killed.
 */
import { openDb } from '../../../src/db/index.js';
import { WorkQueue } from '../../../src/work/index.js';
import { due, ITEMS } from './targets.js';

const job = JSON.parse(process.argv[2] ?? '{}') as {
  url: string;
  name: string;
  mode: 'drain' | 'hold';
  leaseMs: number;
  batch: number;
  /** Epoch ms to begin at, so processes that started one after another claim side by side. */
  startAt?: number;
};
const db = await openDb(job.url);
// sleep: until the start time the workers share, so they claim side by side.
await new Promise((resolve) => setTimeout(resolve, Math.max(0, (job.startAt ?? 0) - Date.now())));
const work = new WorkQueue<{ id: string }>(db, ITEMS, { leaseMs: job.leaseMs });

if (job.mode === 'hold') {
  const claims = await work.claim(job.batch, due());
  for (const claim of claims) work.keep(claim);
  console.log(JSON.stringify({ claimed: claims.map((c) => c.row.id) }));
  // Held until SIGKILL; the interval keeps the process (and the renewal timer) alive.
  setInterval(() => {}, 1_000);
} else {
  for (;;) {
    const claims = await work.claim(job.batch, due());
    if (claims.length === 0) break;
    console.log(JSON.stringify({ claimed: claims.map((c) => c.row.id) }));
    for (const claim of claims) {
      // sleep: a little work per item, so the three workers' claims interleave.
      await new Promise((resolve) => setTimeout(resolve, 1));
      if (!(await work.complete(db, claim, 'done', { done_by: job.name }))) throw new Error(`lost ${claim.row.id}`);
    }
  }
  console.log('done');
  await db.close();
}
