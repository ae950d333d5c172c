/**
 * Run with execFileSync, it stalls its parent (renewals included) until another process has taken a
 * key over: it exits once the key's record carries a fence above the holder's, and fails after 30 s.
 * A fixed stall could end before a loaded machine's other process got round to the takeover. Its job,
 * as JSON in argv[2]: the store spec, tenant, action, key and the holder's fence.
 */
import { openStore, type StoreSpec } from '../../support/stores.js';
import { until } from '../../support/wait.js';

const job = JSON.parse(process.argv[2] ?? '{}') as {
  store: StoreSpec;
  tenant: string;
  action: string;
  key: string;
  fence: number;
};
const store = openStore(job.store);
await until(
  `another process to take ${job.key} over from fence ${job.fence}`,
  () => store.get({ tenant: job.tenant, action: job.action, key: job.key }),
  (record) => (record?.fence ?? 0) > job.fence,
  { timeoutMs: 30_000 },
);
await store.close();
