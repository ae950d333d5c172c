/**
 * Across processes, one store each: concurrent calls of one key from 4 processes, and a kill -9 in
 * a stream of completions. Crashes at each window are in processes-crash.test.ts, clock skew in
 * processes-skew.test.ts.
 */
import { randomUUID } from 'node:crypto';
import { expect, it } from 'vitest';
import { startWorker } from '../support/spawn.js';
import { burstOneKey, describeEachStore } from './support/processes.js';

describeEachStore('across processes', (on) => {
  it('4 processes x 50 concurrent calls of one key: one execution, waiters get the value', async () => {
    await burstOneKey(on.spec, `burst-${randomUUID().slice(0, 8)}`);
  });

  it('kill -9 in the middle of a stream of completions loses no finished record', async () => {
    const action = `stream-${randomUUID().slice(0, 8)}`;
    const worker = startWorker({ store: on.spec, mode: 'stream', action, key: 'K' });
    await worker.waitFor('done 30');
    worker.child.kill('SIGKILL');
    await worker.exited;
    for (let i = 0; i <= 30; i++) {
      const r = await on.once.run({ action, key: `K-${i}` }, async () => ({ i: -1 }));
      expect(r).toMatchObject({ replayed: true, value: { i } });
    }
  });
});
