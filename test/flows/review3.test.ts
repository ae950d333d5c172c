/**
 * Issue 30, items 2 and 3: a step whose result cannot be stored is failed and kept (its effect never
 * runs again), and signals are taken in the order they were delivered, whatever the delivering
 * processes' clocks say.
 */
import { randomUUID } from 'node:crypto';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { type Db, openDb } from '../../src/db/index.js';
import { type AnyFlow, createFlows, defineFlow, type Flows, type FlowsOptions } from '../../src/flows/index.js';
import { dropSchema, freshSchema, POSTGRES_URL } from '../support/postgres.js';
import { startWorker, type Worker } from '../support/spawn.js';
import { selectStores } from '../support/store-filter.js';
import { until } from '../support/wait.js';

const SENDER = fileURLToPath(new URL('./support/signal-sender.ts', import.meta.url));
const uid = () => randomUUID().replaceAll('-', '').slice(0, 8);

/** The results a step cannot store, and the code each is stored with. */
const UNSTORABLE: readonly { kind: string; code: string; value: () => unknown; options?: Partial<FlowsOptions> }[] = [
  { kind: 'a BigInt', code: 'RESULT_NOT_SERIALIZABLE', value: () => ({ amount: 10n }) },
  {
    kind: 'a cycle',
    code: 'RESULT_NOT_SERIALIZABLE',
    value: () => {
      const node: { self?: unknown } = {};
      node.self = node;
      return node;
    },
  },
  {
    kind: 'a result over maxResultBytes',
    code: 'RESULT_TOO_LARGE',
    value: () => 'x'.repeat(2_000),
    options: { maxResultBytes: 1_000 },
  },
  { kind: 'a 2 MiB result (the 1 MiB default cap)', code: 'RESULT_TOO_LARGE', value: () => 'x'.repeat(2 << 20) },
];

function describeReview(name: string, open: () => Promise<{ target: string; cleanup: () => Promise<void> }>) {
  describe(`flows review3: ${name}`, () => {
    let target: string;
    let cleanup: () => Promise<void>;
    let db: Db;
    const opened: Flows[] = [];
    const workers: Worker[] = [];

    beforeAll(async () => {
      ({ target, cleanup } = await open());
      db = await openDb(target);
    });
    afterEach(async () => {
      for (const w of workers.splice(0)) if (w.child.exitCode === null) w.child.kill('SIGKILL');
      for (const flows of opened.splice(0)) await flows.stop();
    });
    afterAll(async () => {
      await db?.close();
      await cleanup?.();
    });

    async function flowsOf(defs: AnyFlow[], options: Partial<FlowsOptions> = {}) {
      const flows = await createFlows({ db, flows: defs, poll: '20ms', lease: '5s', metrics: false, ...options });
      opened.push(flows);
      await flows.startWorker();
      return flows;
    }

    for (const unstorable of UNSTORABLE)
      it(`review3.2: a step returning ${unstorable.kind} is failed with ${unstorable.code} and kept; a retry of the flow does not run its effect again`, async () => {
        let effects = 0;
        let after = 0;
        const def = defineFlow(`unstorable-${uid()}`, { seed: ['id'] }, async (run, _input: { id: string }) => {
          const minted = await run.step('mint', () => {
            effects++;
            return unstorable.value();
          });
          await run.step('after', () => ++after);
          return minted;
        });
        const flows = await flowsOf([def], unstorable.options);
        const { workflowId } = await flows.start(def, { id: 'M1' });
        await expect(flows.result(workflowId, { timeout: '10s' })).rejects.toMatchObject({ code: 'FLOW_FAILED' });
        // Not retried within the run either (the policy's default is 3 tries): the effect happened.
        expect(effects).toBe(1);
        const failed = await flows.show(workflowId);
        expect(failed?.error?.code).toBe(unstorable.code);
        expect(failed?.steps.find((s) => s.stepId === 'mint')).toMatchObject({
          status: 'failed',
          attempts: 1,
          result: null,
          error: { code: unstorable.code },
        });

        expect(await flows.retry(workflowId)).toBe(true);
        await until('the retried flow failed again', async () => (await flows.get(workflowId))?.status === 'failed');
        await expect(flows.result(workflowId, { timeout: '10s' })).rejects.toMatchObject({ code: 'FLOW_FAILED' });
        expect(effects).toBe(1);
        expect(after).toBe(0);
        expect((await flows.show(workflowId))?.steps.find((s) => s.stepId === 'mint')).toMatchObject({
          status: 'failed',
          error: { code: unstorable.code },
        });
      });

    it('review3.2: a flow whose own result is over maxResultBytes fails with RESULT_TOO_LARGE, its steps run once', async () => {
      let effects = 0;
      const def = defineFlow(`big-${uid()}`, { seed: ['id'] }, async (run, _input: { id: string }) => {
        const size = await run.step('measure', () => ++effects * 2_000);
        return 'x'.repeat(size);
      });
      const flows = await flowsOf([def], { maxResultBytes: 1_000 });
      const { workflowId } = await flows.start(def, { id: 'B1' });
      await expect(flows.result(workflowId, { timeout: '10s' })).rejects.toMatchObject({ code: 'FLOW_FAILED' });
      const failed = await flows.get(workflowId);
      expect(failed).toMatchObject({ status: 'failed', result: null, error: { code: 'RESULT_TOO_LARGE' } });
      expect(effects).toBe(1);
    });

    it('review3.2: maxResultBytes is refused as the engine refuses it', async () => {
      for (const bad of [0, 1.5, -1])
        await expect(createFlows({ db, flows: [], maxResultBytes: bad })).rejects.toMatchObject({
          code: 'INVALID_ARGUMENT',
          message: 'maxResultBytes must be a positive integer',
        });
    });

    it('review3.3: two processes whose clocks disagree by 5 s each deliver one signal: each signal is taken by one wait, exactly once', async () => {
      const def = defineFlow(`approvals-${uid()}`, { seed: ['id'] }, async (run, _input: { id: string }) => {
        const first = await run.waitFor<{ by: string }>('approval');
        const second = await run.waitFor<{ by: string }>('approval');
        return [first, second];
      });
      const flows = await flowsOf([def]);
      const { workflowId } = await flows.start(def, { id: 'A1' });
      await until(
        'the flow waiting at its first wait',
        async () => (await flows.get(workflowId))?.status === 'waiting',
      );
      const sender = (signalId: string, skewMs: number) => {
        const worker = startWorker(
          { target, workflowId, name: 'approval', signalId, payload: { by: signalId }, skewMs },
          SENDER,
        );
        workers.push(worker);
        return worker;
      };
      // One host's clock runs 2.5 s ahead, the other's 2.5 s behind.
      const ahead = sender('sig-ahead', 2_500);
      const behind = sender('sig-behind', -2_500);
      await Promise.all([ahead.waitFor('ready'), behind.waitFor('ready')]);

      ahead.child.stdin.write('go\n');
      await ahead.waitFor('sent');
      // The first wait takes the first signal before the second is delivered.
      await until(
        'the first wait completed',
        async () =>
          (await flows.show(workflowId))?.steps.find((s) => s.stepId === 'wait:approval:1')?.status === 'completed',
      );
      behind.child.stdin.write('go\n');
      await behind.waitFor('sent');

      expect(await flows.result(workflowId, { timeout: '15s' })).toEqual([{ by: 'sig-ahead' }, { by: 'sig-behind' }]);
      const shown = await flows.show(workflowId);
      // Numbered by delivery, though the second's receivedAt (its process's clock) is 5 s before the first's.
      expect(shown?.signals.map((s) => [s.signalId, s.seq])).toEqual([
        ['sig-ahead', 1],
        ['sig-behind', 2],
      ]);
      const [a, b] = shown?.signals ?? [];
      expect((a?.receivedAt ?? 0) - (b?.receivedAt ?? 0)).toBeGreaterThan(4_000);
      await Promise.all([ahead.exited, behind.exited]);
    }, 30_000);
  });
}

const schema = freshSchema();
for (const { name, open } of selectStores([
  {
    name: 'sqlite',
    open: async () => ({
      target: join(mkdtempSync(join(tmpdir(), 'oncely-review3-')), 'flows.db'),
      cleanup: async () => {},
    }),
  },
  {
    name: 'postgres',
    open: async () => ({ target: `${POSTGRES_URL}?schema=${schema}`, cleanup: () => dropSchema(schema) }),
  },
] as const))
  describeReview(name, open);
