/**
 * A host process of the duplicate-scan tests: opens the app of `duplicates.test.ts` on a database,
 * prints "ready", waits for "go" on stdin, runs `passes` scans (each reads on from the last page of
 * groups), stops (its totals flushed) and prints what it counted as JSON. Two of these released at once scan the same findings side by side.
 */
import { tmpdir } from 'node:os';
import { createInterface } from 'node:readline';
import { openDb } from '../../src/db/index.js';
import { createHost } from '../../src/host/host.js';
import { recordStoreFor } from '../../src/host/records.js';

const job = JSON.parse(process.argv[2] ?? '{}') as {
  target: string;
  schemaSql: string;
  effects: never;
  passes: number;
};
const db = await openDb(job.target, { poolSize: 4 });
const host = await createHost(
  {
    dir: tmpdir(),
    config: { effects: job.effects, duplicateScan: false },
    schemaSql: job.schemaSql,
    handlers: new Map(),
    consumers: new Map(),
    flows: [],
  },
  db,
  recordStoreFor(db),
);
await host.migrate();
console.log('ready');
const lines = createInterface({ input: process.stdin });
for await (const line of lines) if (line === 'go') break;
let counted = 0;
let groups = 0;
for (let pass = 0; pass < job.passes; pass++) {
  const scan = await host.scanDuplicates();
  counted += scan.counted;
  groups += scan.findings.length;
}
await host.stop();
console.log(JSON.stringify({ counted, groups }));
process.exit(0);
