/**
 * A process calling many keys on a Redis Cluster store while the parent kills a master: prints
 * "ready", waits for "go" on stdin, calls `keys` keys (`k-<i>`, starting at `offset` and wrapping,
 * so processes with other offsets contend for the same keys), `concurrency` at once, prints
 * "answered" after its first value, and at the end one JSON line: each call's key, outcome (executed, replayed, or an error's code) and when it
 * was answered (epoch ms). An execution appends its key to the `sink` file first, as a downstream
 * effect the test counts afterwards.
 */
import { appendFileSync } from 'node:fs';
import { createInterface } from 'node:readline';
import { createOncely, OncelyError } from '../../../src/index.js';
import { openStore, type StoreSpec } from '../../support/stores.js';

interface Job {
  store: StoreSpec;
  action: string;
  keys: number;
  offset: number;
  concurrency: number;
  sink: string;
}

const job = JSON.parse(process.argv[2] ?? '{}') as Job;
// A lease longer than a failover, so a completion refused while the master is gone is retried
// (completionRetry follows the lease) until the promoted replica takes it.
const once = await createOncely({ store: openStore(job.store), tenant: 'acme', defaults: { lease: '15s' } });
const lines = createInterface({ input: process.stdin });
console.log('ready');
await new Promise<void>((resolve) => lines.once('line', () => resolve()));
lines.close();

const outcomes: { key: string; kind: string; at: number; by?: number }[] = [];
let next = 0;
async function lane(): Promise<void> {
  while (next < job.keys) {
    const key = `k-${(job.offset + next++) % job.keys}`;
    try {
      const r = await once.run({ action: job.action, key }, async () => {
        appendFileSync(job.sink, `${key}\n`);
        // sleep: each effect takes a moment, so the kill lands among running ones.
        await new Promise((r) => setTimeout(r, 5));
        return { by: process.pid };
      });
      outcomes.push({ key, kind: r.replayed ? 'replayed' : 'executed', at: Date.now(), by: r.value.by });
      if (outcomes.length === 1) console.log('answered');
    } catch (error) {
      outcomes.push({ key, kind: error instanceof OncelyError ? error.code : String(error), at: Date.now() });
    }
  }
}
await Promise.all(Array.from({ length: job.concurrency }, lane));
console.log(JSON.stringify(outcomes));
await once.close();
