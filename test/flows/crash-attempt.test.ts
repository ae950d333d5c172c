/**
 * A step whose worker is killed (kill -9) after its effect, before its completion is stored, runs
 * again in the worker that takes the flow over: it is told attempt 2, `oncely flows show --db` shows
 * attempts 2 and the run that died, and the admin timeline labels it retried.
 */
import { randomUUID } from 'node:crypto';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';
import { type Db, openDb } from '../../src/db/index.js';
import { createFlows, type Flows } from '../../src/flows/index.js';
import { withTimeline } from '../../src/ops/admin-timeline.js';
import { dropSchema, freshSchema, POSTGRES_URL } from '../support/postgres.js';
import { startWorker } from '../support/spawn.js';
import { selectStores } from '../support/store-filter.js';
import { chargeFlow } from './support/charge-flow.js';
import { oncely } from './support/cli.js';

const CRASHING = fileURLToPath(new URL('./support/crash-step-worker.ts', import.meta.url));

const DATABASES = selectStores([
  {
    name: 'sqlite',
    fresh: async () => ({ target: join(mkdtempSync(join(tmpdir(), 'oncely-crash-')), 'app.db'), drop: async () => {} }),
  },
  {
    name: 'postgres',
    fresh: async () => {
      const schema = freshSchema();
      return { target: `${POSTGRES_URL}?schema=${schema}`, drop: () => dropSchema(schema) };
    },
  },
] as const);

for (const database of DATABASES)
  describe(`a step killed mid-run on ${database.name}`, () => {
    const cleanups: (() => Promise<void>)[] = [];
    afterEach(async () => {
      for (const c of cleanups.splice(0).reverse()) await c();
    });

    it('review3.16: kill -9 after the effect: the step runs again as attempt 2, and show --db names the run that died', async () => {
      const { target, drop } = await database.fresh();
      cleanups.push(drop);
      const db: Db = await openDb(target);
      cleanups.push(() => db.close());
      await db.run(
        'CREATE TABLE charge_attempts (step_key TEXT NOT NULL, attempt INTEGER NOT NULL, worker TEXT NOT NULL)',
      );
      const tag = randomUUID().slice(0, 8);
      const flow = chargeFlow(tag, db, 'survivor');
      // Starts the flow and reads it; runs nothing until the crashed worker is gone.
      const starter: Flows = await createFlows({ db, flows: [flow], metrics: false });
      const { workflowId } = await starter.start(flow, { order: 'ORD-1' });

      const crashing = startWorker({ target, tag, lease: 1_000 }, CRASHING);
      const exit = await crashing.exited;
      expect(exit.signal).toBe('SIGKILL');
      const key = `${workflowId}:charge`;
      expect(await db.all('SELECT step_key, attempt, worker FROM charge_attempts')).toEqual([
        { step_key: key, attempt: 1, worker: 'crashed' },
      ]);
      // In flight when it died: the attempt was stored before its effect.
      const midway = JSON.parse((await oncely('flows', 'show', workflowId, '--db', target)).stdout);
      expect(midway.steps.find((s: { stepId: string }) => s.stepId === 'charge')).toMatchObject({
        status: 'running',
        attempts: 1,
        run: 1,
      });

      const survivor = await createFlows({ db, flows: [flow], poll: '20ms', metrics: false });
      cleanups.push(() => survivor.stop());
      await survivor.startWorker();
      expect(await survivor.result(workflowId, { timeout: '20s' })).toBe(`charged ${key}`);
      expect(await db.all('SELECT step_key, attempt, worker FROM charge_attempts ORDER BY attempt')).toEqual([
        { step_key: key, attempt: 1, worker: 'crashed' },
        { step_key: key, attempt: 2, worker: 'survivor' },
      ]);

      const shown = await oncely('flows', 'show', workflowId, '--db', target);
      expect(shown.code).toBe(0);
      const flowShown = JSON.parse(shown.stdout);
      expect(flowShown).toMatchObject({ status: 'completed', runs: 2 });
      expect(flowShown.steps).toMatchObject([
        { stepId: 'reserve', status: 'completed', attempts: 1, run: 1, error: null },
        {
          stepId: 'charge',
          status: 'completed',
          attempts: 2,
          run: 2,
          error: { code: 'LEASE_LOST', message: expect.stringContaining('run 1 ended during attempt 1') },
        },
      ]);
      // The dashboard's timeline: reserve stored by the run that died, charge retried in the next.
      const timeline = await withTimeline(
        db,
        (await survivor.show(workflowId)) as NonNullable<Awaited<ReturnType<Flows['show']>>>,
      );
      expect(timeline.steps.map((s) => [s.stepId, s.memoized, s.retried, s.run])).toEqual([
        ['reserve', true, false, 1],
        ['charge', false, true, 2],
      ]);
    }, 60_000);
  });
