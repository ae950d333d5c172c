/**
 * A separate process that runs the engine against a shared store, driven by the cross-process and
 * crash tests. Modes:
 * - burst: prints "ready", waits for "go" on stdin, runs `calls` concurrent calls of one key and
 *   prints a JSON summary.
 * - hang: claims the key, performs the downstream effect if asked, prints the window it reached
 *   and waits to be killed with SIGKILL.
 * - stream: completes keys `<key>-0`, `<key>-1`, ... one after another, printing "done <i>" after
 *   each completion returned, until killed.
 * - probe: prints "ready", waits for "go", then calls the key every 50 ms for `durationMs`,
 *   counting executions, IN_PROGRESS answers and replays, and prints them as JSON.
 * `skewMs` sets this process's clock (Date.now) that far off, as on a host whose clock is wrong.
 */
import { createInterface } from 'node:readline';
import Database from 'better-sqlite3';
import { createOncely, OncelyError } from '../../src/index.js';
import { openStore, type StoreSpec } from './stores.js';

interface Job {
  store: StoreSpec;
  mode: 'burst' | 'hang' | 'stream' | 'probe';
  action: string;
  key: string;
  calls?: number;
  lease?: number;
  onLeaseExpired?: 'retry' | 'hold';
  /** SQLite file of the downstream that dedupes on the idempotency key. */
  sink?: string;
  /** For hang: perform the effect before hanging. */
  effect?: boolean;
  /** How far this process's clock is off, in ms (positive: ahead). */
  skewMs?: number;
  /** For probe: how long to keep calling. */
  durationMs?: number;
}

const job = JSON.parse(process.argv[2] ?? '{}') as Job;
if (job.skewMs) {
  const realNow = Date.now;
  const skew = job.skewMs;
  Date.now = () => realNow() + skew;
}
const once = await createOncely({
  store: openStore(job.store),
  tenant: 'acme',
  defaults: { lease: job.lease ?? 2_000 },
});

function sendToSink(key: string, by: string): void {
  if (!job.sink) return;
  const db = new Database(job.sink);
  db.pragma('busy_timeout = 5000');
  // The downstream's own dedupe: a unique key and INSERT OR IGNORE, as a payment gateway would.
  db.prepare('INSERT OR IGNORE INTO effects (idempotency_key, done_by) VALUES (?, ?)').run(key, by);
  db.prepare('INSERT INTO calls (idempotency_key, done_by) VALUES (?, ?)').run(key, by);
  db.close();
}

if (job.mode === 'stream') {
  for (let i = 0; ; i++) {
    await once.run({ action: job.action, key: `${job.key}-${i}` }, async () => ({ i }));
    console.log(`done ${i}`);
  }
} else if (job.mode === 'hang') {
  await once.run({ action: job.action, key: job.key, onLeaseExpired: job.onLeaseExpired }, async (ctx) => {
    console.log('claimed');
    if (job.effect) {
      sendToSink(ctx.idempotencyKey, `pid ${process.pid}`);
      console.log('effect');
    }
    await new Promise(() => {});
  });
} else if (job.mode === 'probe') {
  const lines = createInterface({ input: process.stdin });
  console.log('ready');
  await new Promise<void>((resolve) => lines.once('line', () => resolve()));
  lines.close();
  const counts = { executed: 0, inProgress: 0, replayed: 0, other: [] as string[] };
  // Timed by the monotonic clock: Date.now is the skewed one.
  const end = performance.now() + (job.durationMs ?? 1_000);
  while (performance.now() < end) {
    try {
      const r = await once.run({ action: job.action, key: job.key }, async () => {
        counts.executed++;
        return 'probe';
      });
      if (r.replayed) counts.replayed++;
    } catch (error) {
      if (error instanceof OncelyError && error.code === 'IN_PROGRESS') counts.inProgress++;
      else counts.other.push(String(error));
    }
    // sleep: the probe's pace: it asks about the key every 50 ms while the holder holds it.
    await new Promise((r) => setTimeout(r, 50));
  }
  console.log(JSON.stringify(counts));
  await once.close();
} else {
  const lines = createInterface({ input: process.stdin });
  console.log('ready');
  await new Promise<void>((resolve) => lines.once('line', () => resolve()));
  lines.close();
  let executed = 0;
  const outcomes = await Promise.all(
    Array.from({ length: job.calls ?? 50 }, async (_, i) => {
      try {
        const r = await once.run(
          { action: job.action, key: job.key, wait: i % 2 === 0 ? '20s' : false },
          async (ctx) => {
            executed++;
            sendToSink(ctx.idempotencyKey, `pid ${process.pid}`);
            // sleep: a slow effect, so the other processes' calls arrive while it holds the key.
            await new Promise((r) => setTimeout(r, 300));
            return { by: process.pid };
          },
        );
        return { kind: r.replayed ? 'replayed' : 'executed', waited: i % 2 === 0, value: r.value };
      } catch (error) {
        return { kind: error instanceof OncelyError ? error.code : String(error), waited: i % 2 === 0 };
      }
    }),
  );
  console.log(JSON.stringify({ executed, outcomes }));
  await once.close();
}
