/**
 * Processes whose clocks disagree, sharing one store that has a clock of its own (PostgreSQL,
 * Redis, MySQL). SQLite is one host, one clock, so it is not among them.
 */
import { randomUUID } from 'node:crypto';
import { expect, it } from 'vitest';
import { createOncely } from '../../src/index.js';
import { startWorker } from '../support/spawn.js';
import { openStore } from '../support/stores.js';
import { until } from '../support/wait.js';
import { describeEachStore, sleep } from './support/processes.js';

describeEachStore(
  'clock skew',
  (on) => {
    it('defect 11.10: a renewing 1 s lease is not taken over by a process whose clock runs 2 s ahead', async () => {
      const once = await createOncely({ store: openStore(on.spec), tenant: 'acme', defaults: { lease: '1s' } });
      const action = `skew-${randomUUID().slice(0, 8)}`;
      const probe = startWorker({
        store: on.spec,
        mode: 'probe',
        action,
        key: 'K-1',
        lease: 1_000,
        skewMs: 2_000,
        durationMs: 3_500,
      });
      await probe.waitFor('ready');
      let runs = 0;
      const holder = once.run({ action, key: 'K-1' }, async () => {
        runs++;
        // sleep: three leases long, renewed every third of one: healthy throughout.
        await sleep(3_000);
        return 'held';
      });
      await until('the holder to claim K-1', () => runs === 1);
      probe.child.stdin.write('go\n');
      const counts = JSON.parse(await probe.waitFor('{')) as {
        executed: number;
        inProgress: number;
        replayed: number;
        other: string[];
      };
      expect((await holder).value).toBe('held');
      // Judged by the skewed clock, the holder's lease looked a second overdue all along.
      expect(counts).toMatchObject({ executed: 0, other: [] });
      expect(counts.inProgress).toBeGreaterThan(10);
      expect(counts.replayed).toBeGreaterThan(0);
      expect(runs).toBe(1);
      await probe.exited;
      await once.close();
    });
  },
  { ownClock: true },
);
