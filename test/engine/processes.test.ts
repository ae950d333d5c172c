/**
 * Across processes, one store each: concurrent calls of one key from 4 processes, and a kill -9 in
 * a stream of completions. Crashes at each window are in processes-crash.test.ts, clock skew in
 * processes-skew.test.ts.
 */
import { randomUUID } from 'node:crypto';
import { expect, it } from 'vitest';
import { startWorker } from '../support/spawn.js';
import { describeEachStore, makeSink } from './support/processes.js';

describeEachStore('across processes', (on) => {
  it('4 processes x 50 concurrent calls of one key: one execution, waiters get the value', async () => {
    const action = `burst-${randomUUID().slice(0, 8)}`;
    const sink = makeSink();
    const workers = Array.from({ length: 4 }, () =>
      startWorker({ store: on.spec, mode: 'burst', action, key: 'ORD-1:sms', calls: 50, sink: sink.path }),
    );
    await Promise.all(workers.map((w) => w.waitFor('ready')));
    for (const w of workers) w.child.stdin.write('go\n');
    const reports = await Promise.all(
      workers.map(
        async (w) =>
          JSON.parse(await w.waitFor('{')) as {
            executed: number;
            outcomes: { kind: string; waited: boolean; value?: { by: number } }[];
          },
      ),
    );
    const outcomes = reports.flatMap((r) => r.outcomes);
    expect(reports.reduce((n, r) => n + r.executed, 0)).toBe(1);
    expect(sink.calls('ORD-1:sms')).toBe(1);
    expect(outcomes).toHaveLength(200);
    expect(outcomes.filter((o) => o.kind === 'executed')).toHaveLength(1);
    const winner = outcomes.find((o) => o.kind === 'executed')?.value?.by;
    for (const o of outcomes) {
      expect(['executed', 'replayed', 'IN_PROGRESS']).toContain(o.kind);
      if (o.waited) expect(o.kind === 'executed' || o.kind === 'replayed').toBe(true);
      if (o.kind === 'replayed') expect(o.value?.by).toBe(winner);
    }
    await Promise.all(workers.map((w) => w.exited));
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
