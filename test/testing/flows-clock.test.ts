/**
 * A manual clock drives the flows' work queue: a worker whose flow hangs keeps its 30 s claim until
 * the test moves the clock past it, then another worker takes the flow over and finishes it, in
 * milliseconds of real time.
 */
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { expect, it } from 'vitest';
import { openDb } from '../../src/db/index.js';
import { createFlows, defineFlow } from '../../src/flows/index.js';
import { manualClock } from '../../src/testing/index.js';

it('a flow lease runs out by the manual clock: the next worker takes the flow over', async () => {
  const db = await openDb(join(mkdtempSync(join(tmpdir(), 'oncely-flows-clock-')), 'flows.db'));
  const clock = manualClock();
  const runs: string[] = [];
  let unstick!: (value: string) => void;
  const stuck = defineFlow<{ id: string }, string>('ship', { seed: ['id'] }, (run) =>
    run.step('label', () => {
      runs.push('a');
      return new Promise<string>((resolve) => {
        unstick = resolve;
      });
    }),
  );
  const works = defineFlow<{ id: string }, string>('ship', { seed: ['id'] }, (run) =>
    run.step('label', () => {
      runs.push('b');
      return 'labelled by b';
    }),
  );
  const a = await createFlows({ db, flows: [stuck], poll: '10ms', lease: '30s', clock });
  const b = await createFlows({ db, flows: [works], poll: '10ms', lease: '30s', clock });
  let stopping: Promise<void> | undefined;
  try {
    await a.startWorker();
    const { workflowId } = await a.start(stuck, { id: 'P-1' });
    await expect.poll(() => runs).toEqual(['a']);
    // A stops looking for work, as a stalled process does; its step is still running.
    stopping = a.stop();
    await b.startWorker();
    // sleep: B polls for 100 ms of real time, in which the lease, by the manual clock, has not run out.
    await new Promise((r) => setTimeout(r, 100));
    expect(runs).toEqual(['a']);
    clock.advance('31s');
    expect(await b.result(workflowId, { timeout: '5s' })).toBe('labelled by b');
    expect(runs).toEqual(['a', 'b']);
    unstick('labelled by a');
    // A's stop resolves once its late step has finished and tried its write.
    await stopping;
    expect(await b.result(workflowId)).toBe('labelled by b');
  } finally {
    // A's late step finishes after the takeover: its fenced write changes nothing.
    unstick?.('labelled by a');
    await b.stop();
    await (stopping ?? a.stop());
    await db.close();
  }
});
