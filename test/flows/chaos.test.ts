/**
 * The proof: flow workers in separate processes, killed with SIGKILL at random moments and
 * restarted, until every flow completed; every step's side effect seen exactly once by a downstream
 * that dedupes on the step key.
 */
import { randomUUID } from 'node:crypto';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { type Db, openDb } from '../../src/db/index.js';
import { createFlows, type Flows } from '../../src/flows/index.js';
import { dropSchema, freshSchema, POSTGRES_URL } from '../support/postgres.js';
import { startWorker, type Worker } from '../support/spawn.js';
import { selectStores } from '../support/store-filter.js';
import { until } from '../support/wait.js';
import { CHAOS_STEPS, chaosFlow } from './support/chaos-flow.js';

const WORKER = fileURLToPath(new URL('./support/chaos-worker.ts', import.meta.url));
interface ChaosPlan {
  /** Worker processes running at once. */
  workers: number;
  flows: number;
  /** Kills, one every 300 to 500 ms for as long as flows remain: the run must see at least this many. */
  minKills: number;
  /** Lease of each worker, in ms: a killed worker's flows are taken over once it runs out. */
  lease: number;
  concurrency: number;
  /** Each step waits up to this long (random) before its effect, and again after it. */
  stepMs: number;
  /** Test timeout, in ms. */
  timeout: number;
}

function describeChaos(
  name: string,
  plan: ChaosPlan,
  open: () => Promise<{ target: string; cleanup: () => Promise<void> }>,
) {
  describe(`flows chaos: ${name}`, () => {
    const cleanups: (() => Promise<void>)[] = [];
    afterAll(async () => {
      for (const cleanup of cleanups.reverse()) await cleanup();
    });

    it(
      `${plan.workers} workers, ${plan.flows} flows of 4 steps, kill -9 and restart every 300-500 ms: every flow completes, every step's effect lands once`,
      async () => {
        const began = Date.now();
        const { target, cleanup } = await open();
        cleanups.push(cleanup);
        const db: Db = await openDb(target);
        cleanups.push(() => db.close());
        await db.run('CREATE TABLE flow_sink (step_key TEXT PRIMARY KEY, worker TEXT NOT NULL, at BIGINT NOT NULL)');
        await db.run('CREATE TABLE flow_attempts (step_key TEXT NOT NULL, worker TEXT NOT NULL, at BIGINT NOT NULL)');

        const tag = randomUUID().slice(0, 8);
        const flow = chaosFlow(tag, async () => {
          throw new Error('the test process runs no flow');
        });
        // Starts flows and reads them; runs none (no worker in this process).
        const starter: Flows = await createFlows({ db, flows: [flow] });

        let generation = 0;
        const spawn = () => {
          generation++;
          return startWorker(
            {
              target,
              tag,
              worker: `w${generation}`,
              lease: plan.lease,
              concurrency: plan.concurrency,
              stepMs: plan.stepMs,
            },
            WORKER,
          );
        };
        const live: Worker[] = Array.from({ length: plan.workers }, spawn);
        cleanups.push(async () => {
          for (const w of live) if (w.child.exitCode === null && w.child.signalCode === null) w.child.kill('SIGKILL');
        });
        await Promise.all(live.map((w) => w.waitFor('ready')));

        const started = await Promise.all(Array.from({ length: plan.flows }, (_, n) => starter.start(flow, { n })));
        expect(started.every((s) => !s.already)).toBe(true);
        const ids = started.map((s) => s.workflowId);
        const startedAt = Date.now();

        const completed = async () =>
          Number(
            (
              await db.all<{ n: number | string }>(
                `SELECT COUNT(*) AS n FROM oncely_flows WHERE name = ? AND status = 'completed'`,
                [flow.name],
              )
            )[0]?.n,
          );
        const deadline = began + plan.timeout - 10_000;
        let kills = 0;
        const killedAt: number[] = [];
        // Every 300-500 ms until every flow completed: a worker killed with -9 and another started.
        await until(
          `all ${plan.flows} flows completed, under kills`,
          async () => {
            // sleep: the pace of the kills, which is the chaos.
            await new Promise((r) => setTimeout(r, 300 + Math.random() * 200));
            const done = await completed();
            if (done < plan.flows) {
              const i = Math.floor(Math.random() * live.length);
              const victim = live[i] as Worker;
              victim.child.kill('SIGKILL');
              const { signal } = await victim.exited;
              expect(signal).toBe('SIGKILL');
              killedAt.push(await completed());
              kills++;
              live[i] = spawn();
            }
            return done;
          },
          (done) => done >= plan.flows,
          { timeoutMs: deadline - Date.now(), intervalMs: 1 },
        );
        const allDone = Date.now();

        // Graceful shutdown: SIGTERM lets each worker finish what it holds and exit 0.
        await Promise.all(live.map((w) => w.waitFor('ready')));
        for (const w of live) w.child.kill('SIGTERM');
        const exits = await Promise.all(live.map((w) => w.exited));
        expect(exits.map((e) => e.code)).toEqual(live.map(() => 0));

        // Every flow completed, with the keys of its own steps.
        const records = await Promise.all(ids.map((id) => starter.get(id)));
        expect(records.filter((r) => r?.status !== 'completed')).toEqual([]);
        for (const [i, id] of ids.entries())
          expect(records[i]?.result).toEqual(CHAOS_STEPS.map((step) => `${id}:${step}`));
        const expected = new Set(ids.flatMap((id) => CHAOS_STEPS.map((step) => `${id}:${step}`)));

        // The deduping downstream saw each step's effect exactly once.
        const sink = await db.all<{ step_key: string }>('SELECT step_key FROM flow_sink');
        expect(sink).toHaveLength(plan.flows * 4);
        expect(new Set(sink.map((r) => r.step_key))).toEqual(expected);

        // Executions: every one carried a key of the expected set (stable across takeovers); some repeated.
        const attempts = await db.all<{ step_key: string; worker: string }>(
          'SELECT step_key, worker FROM flow_attempts',
        );
        expect(new Set(attempts.map((r) => r.step_key))).toEqual(expected);
        const perKey = new Map<string, number>();
        for (const a of attempts) perKey.set(a.step_key, (perKey.get(a.step_key) ?? 0) + 1);
        const repeatedKeys = [...perKey.values()].filter((n) => n > 1).length;
        const takenOver = records.filter((r) => (r?.runs ?? 0) > 1).length;
        const workersSeen = new Set(attempts.map((a) => a.worker)).size;
        const steps = (
          await db.all<{ status: string; n: number | string }>(
            `SELECT s.status, COUNT(*) AS n FROM oncely_flow_steps s JOIN oncely_flows f ON f.workflow_id = s.workflow_id WHERE f.name = ? GROUP BY s.status`,
            [flow.name],
          )
        ).map((r) => ({ status: r.status, n: Number(r.n) }));
        expect(steps).toEqual([{ status: 'completed', n: plan.flows * 4 }]);

        console.log(
          `[chaos ${name}] ${plan.flows} flows x 4 steps, ${plan.workers} workers, ${kills} kill -9s ` +
            `(flows completed at each kill: ${killedAt.join(', ')}), ${generation} worker processes in all ` +
            `(${workersSeen} ran steps); all completed ${((allDone - startedAt) / 1000).toFixed(1)}s after the starts; ` +
            `step executions ${attempts.length} for ${plan.flows * 4} steps: ${attempts.length - plan.flows * 4} repeated ` +
            `(${repeatedKeys} step keys executed more than once), ${takenOver} flows run more than once; ` +
            `sink rows ${sink.length}; test ${((Date.now() - began) / 1000).toFixed(1)}s`,
        );
        expect(kills).toBeGreaterThanOrEqual(plan.minKills);
      },
      plan.timeout,
    );
  });
}

const schema = freshSchema();
for (const { name, plan, open } of selectStores([
  {
    name: 'postgres',
    plan: { workers: 3, flows: 300, minKills: 10, lease: 1_000, concurrency: 16, stepMs: 100, timeout: 90_000 },
    open: async () => ({ target: `${POSTGRES_URL}?schema=${schema}`, cleanup: () => dropSchema(schema) }),
  },
  {
    name: 'sqlite',
    plan: { workers: 2, flows: 300, minKills: 10, lease: 1_000, concurrency: 16, stepMs: 100, timeout: 90_000 },
    open: async () => ({
      target: join(mkdtempSync(join(tmpdir(), 'oncely-chaos-')), 'flows.db'),
      cleanup: async () => {},
    }),
  },
] as const))
  describeChaos(name, plan, open);
