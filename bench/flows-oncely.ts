/**
 * oncely running the flows workload: `defineFlow` with three `run.step` steps, `flows.start` with
 * the business id as seed, `flows.result` to await the value; a worker in the same process
 * (`flows.startWorker()`) runs the flows, 32 at a time. A duplicate start must say `already`.
 */
import { join } from 'node:path';
import pg from 'pg';
import { openDb } from '../src/db/index.js';
import { createFlows, defineFlow } from '../src/flows/index.js';
import { bizId, checkValue, FLOW_NAME, type FlowSubject, type StepValue, stepOf } from './flows-workload.js';
import { dropSchema, PG_URL } from './setup.js';

const three = defineFlow(FLOW_NAME, { seed: ['id'] }, async (run, input: { id: string }): Promise<StepValue> => {
  const a = await run.step('a', () => stepOf(1, input.id));
  const b = await run.step('b', () => stepOf(2, a.id));
  return run.step('c', () => stepOf(3, b.id));
});

async function subject(target: string, cleanup: () => Promise<void>): Promise<FlowSubject> {
  const flows = await createFlows({ db: await openDb(target), flows: [three], concurrency: 32 });
  await flows.startWorker();
  const call = async (i: number, already: boolean) => {
    const started = await flows.start(three, { id: bizId(i) });
    if (started.already !== already)
      throw new Error(`oncely flow ${bizId(i)}: already ${started.already}, expected ${already}`);
    checkValue('oncely', i, (await flows.result(started.workflowId, { timeout: '30s' })) as StepValue);
  };
  return {
    first: (i) => call(i, false),
    duplicate: (i) => call(i, true),
    async close() {
      try {
        await flows.close();
      } finally {
        await cleanup();
      }
    },
  };
}

/** oncely on PostgreSQL, in a fresh schema of the PG_URL database, dropped on close. */
export function oncelyPostgresSubject(schema: string): Promise<FlowSubject> {
  const url = new URL(PG_URL);
  url.searchParams.set('schema', schema);
  return subject(url.toString(), async () => {
    const client = new pg.Client({ connectionString: PG_URL });
    await client.connect();
    await dropSchema(client, schema).finally(() => client.end());
  });
}

/** oncely on a SQLite file in `dir` (its defaults: WAL, synchronous=FULL). */
export function oncelySqliteSubject(dir: string): Promise<FlowSubject> {
  return subject(join(dir, 'flows.db'), async () => {});
}
