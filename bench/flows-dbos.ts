/**
 * DBOS Transact running the flows workload: a registered workflow of three `DBOS.runStep` steps,
 * started with `DBOS.startWorkflow(fn, { workflowID })` and awaited with `handle.getResult()`; a
 * duplicate start is the same workflowID again, which DBOS attaches to the existing workflow
 * (its default `workflowIDReusePolicy: 'return-existing'`).
 *
 * DBOS keeps its state in a system database: a fresh database on the same PostgreSQL server,
 * created by `DBOS.launch()` and dropped on close. Its pool is DBOS's default (10 connections, the
 * size oncely's PostgreSQL pool opens too). DBOS is a process-wide singleton, so one subject at a time.
 */
import { DBOS } from '@dbos-inc/dbos-sdk';
import pg from 'pg';
import { bizId, checkValue, FLOW_NAME, type FlowSubject, type StepValue, stepOf } from './flows-workload.js';
import { PG_URL } from './setup.js';

const three = DBOS.registerWorkflow(
  async (input: { id: string }): Promise<StepValue> => {
    const a = await DBOS.runStep(() => stepOf(1, input.id), { name: 'a' });
    const b = await DBOS.runStep(() => stepOf(2, a.id), { name: 'b' });
    return DBOS.runStep(() => stepOf(3, b.id), { name: 'c' });
  },
  { name: FLOW_NAME },
);

/** The URL of database `name` on the server PG_URL points at. */
function databaseUrl(name: string): string {
  const url = new URL(PG_URL);
  url.pathname = `/${name}`;
  return url.toString();
}

async function onServer(sql: string): Promise<void> {
  const client = new pg.Client({ connectionString: PG_URL });
  await client.connect();
  try {
    await client.query(sql);
  } finally {
    await client.end();
  }
}

/** Launches DBOS with its system database `database` (created by DBOS, dropped on close). */
export async function dbosSubject(database: string): Promise<FlowSubject> {
  DBOS.setConfig({ name: 'oncely-bench', systemDatabaseUrl: databaseUrl(database), logLevel: 'warn' });
  await DBOS.launch();
  const call = async (i: number) => {
    const id = bizId(i);
    // The workflow id oncely gives the same flow: `<name>-<bizId>`.
    const handle = await DBOS.startWorkflow(three, { workflowID: `${FLOW_NAME}-${id}` })({ id });
    checkValue('dbos', i, await handle.getResult());
  };
  return {
    first: call,
    duplicate: call,
    async close() {
      try {
        await DBOS.shutdown();
      } finally {
        await onServer(`DROP DATABASE IF EXISTS "${database}" WITH (FORCE)`);
      }
    },
  };
}
