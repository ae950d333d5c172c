/**
 * A failed flow waits for an operator's retry, which reruns only its failed step: retention keeps
 * it (and its memoized steps) by default, as it keeps dead letters, and purges it only by an
 * explicit `deadLetters` retention.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { createFlows, defineFlow } from '../../src/flows/index.js';
import { DATABASES, DAY, migratedHost } from './retention-fixture.js';

for (const database of DATABASES) {
  describe(`retention of failed flows on ${database.name}`, () => {
    const cleanups: (() => Promise<void>)[] = [];
    afterEach(async () => {
      for (const c of cleanups.splice(0).reverse()) await c();
    });

    it('review3.8: a failed flow 40 days old is kept with its steps by default; its retry then charges once; deadLetters purges it', async () => {
      const { target, cleanup } = database.fresh();
      cleanups.push(cleanup);
      const { host, db } = await migratedHost(target);
      cleanups.push(() => host.stop());
      const effects = { charge: 0, ship: 0 };
      let courier = false;
      const flow = defineFlow('fulfil', { seed: ['order'] }, async (run, _input: { order: string }) => {
        await run.step('charge', () => ++effects.charge);
        return run.step(
          'ship',
          () => {
            effects.ship++;
            if (!courier) throw new Error('no courier');
            return 'shipped';
          },
          { retry: { attempts: 1 } },
        );
      });
      const flows = await createFlows({ db, flows: [flow], poll: '20ms', metrics: false });
      cleanups.push(() => flows.stop());
      await flows.startWorker();
      const { workflowId } = await flows.start(flow, { order: 'ORD-1' });
      await expect(flows.result(workflowId, { timeout: '10s' })).rejects.toMatchObject({ code: 'FLOW_FAILED' });
      // Past the flows retention (30 days by default), as an operator back from leave finds it.
      await db.run('UPDATE oncely_flows SET updated_at = ? WHERE workflow_id = ?', [Date.now() - 40 * DAY, workflowId]);

      const report = await host.purge();
      expect(report.tables.find((t) => t.table === 'oncely_flows')?.rows).toBe(0);
      expect(report.tables.find((t) => t.table === 'oncely_flow_steps')?.rows).toBe(0);
      const kept = await flows.show(workflowId);
      expect(kept?.status).toBe('failed');
      expect(kept?.steps.map((s) => [s.stepId, s.status])).toEqual([
        ['charge', 'completed'],
        ['ship', 'failed'],
      ]);

      // The retry reruns the failed step only: the customer is charged once.
      courier = true;
      expect(await flows.retry(workflowId)).toBe(true);
      expect(await flows.result(workflowId, { timeout: '10s' })).toBe('shipped');
      expect(effects).toEqual({ charge: 1, ship: 2 });
      // A start of the same order finds the flow, and runs nothing.
      expect(await flows.start(flow, { order: 'ORD-1' })).toEqual({ workflowId, already: true });
      expect(effects).toEqual({ charge: 1, ship: 2 });

      // An explicit deadLetters retention purges a failed flow past it, with its steps.
      courier = false;
      const other = await flows.start(flow, { order: 'ORD-2' });
      await expect(flows.result(other.workflowId, { timeout: '10s' })).rejects.toMatchObject({ code: 'FLOW_FAILED' });
      await db.run('UPDATE oncely_flows SET updated_at = ? WHERE workflow_id = ?', [
        Date.now() - 40 * DAY,
        other.workflowId,
      ]);
      const { host: strict } = await migratedHost(target, { retention: { deadLetters: '30d' } });
      cleanups.push(() => strict.stop());
      const purged = await strict.purge();
      expect(purged.tables.find((t) => t.table === 'oncely_flows')?.rows).toBe(1);
      expect(purged.tables.find((t) => t.table === 'oncely_flow_steps')?.rows).toBe(2);
      expect(await flows.get(other.workflowId)).toBeNull();
      // The completed flow is 40 days younger than its retention: it stays.
      expect((await flows.get(workflowId))?.status).toBe('completed');
    });
  });
}
