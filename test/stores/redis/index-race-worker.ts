/**
 * A process of the index race test (redis-index.test.ts), on the Redis store of `prefix`:
 * - race: calls keys k0..k<keys-1> in its own shuffled order, 16 at a time, under the 'hold'
 *   policy: a key i % 3 == 0 hangs (its lease renewed while this process lives), 1 succeeds, 2
 *   throws (the key is released). Prints "half" once half its keys were called; waits to be killed.
 * - settle: calls every key once more with a function that succeeds, and prints a JSON summary of
 *   the answers (executed, replayed, or the error code).
 */
import { createOncely, OncelyError } from '../../../src/index.js';
import { redisStore } from '../../../src/redis/index.js';

interface Job {
  url: string;
  prefix: string;
  mode: 'race' | 'settle';
  keys: number;
  seed: number;
  lease: number;
}

const job = JSON.parse(process.argv[2] ?? '{}') as Job;
const once = await createOncely({
  store: redisStore({ url: job.url, prefix: job.prefix }),
  tenant: 'acme',
  defaults: { lease: job.lease, onLeaseExpired: 'hold' },
});

// A seeded shuffle (mulberry32), so the two racers call the keys in different orders.
let state = job.seed;
const random = () => {
  state = (state + 0x6d2b79f5) | 0;
  let t = Math.imul(state ^ (state >>> 15), 1 | state);
  t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
  return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
};
const order = Array.from({ length: job.keys }, (_, i) => i);
for (let i = order.length - 1; i > 0; i--) {
  const j = Math.floor(random() * (i + 1));
  [order[i], order[j]] = [order[j] as number, order[i] as number];
}

const counts: Record<string, number> = {};
const count = (what: string) => {
  counts[what] = (counts[what] ?? 0) + 1;
};

async function call(i: number): Promise<void> {
  try {
    const r = await once.run({ action: 'charge', key: `k${i}`, input: { i } }, async () => {
      if (job.mode === 'race' && i % 3 === 0) await new Promise(() => {});
      if (job.mode === 'race' && i % 3 === 2) throw new Error('transient');
      return { i };
    });
    count(r.replayed ? 'replayed' : 'executed');
  } catch (error) {
    count(error instanceof OncelyError ? error.code : 'thrown');
  }
}

let next = 0;
let called = 0;
await Promise.all(
  Array.from({ length: 16 }, async () => {
    while (next < order.length) {
      const i = order[next++] as number;
      const done = call(i);
      if (++called === Math.floor(order.length / 2) && job.mode === 'race') console.log('half');
      // A hanging call never ends: the next key goes on while it holds its claim.
      if (job.mode === 'race' && i % 3 === 0) continue;
      await done;
    }
  }),
);
if (job.mode === 'settle') {
  console.log(JSON.stringify(counts));
  await once.close();
}
