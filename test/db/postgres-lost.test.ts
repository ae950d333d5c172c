import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openPostgres } from '../../src/db/postgres.js';
import type { Db, Sql, StatementCache } from '../../src/db/types.js';
import { createFlows, defineFlow } from '../../src/flows/index.js';
import { dropSchema, freshSchema, POSTGRES_URL } from '../support/postgres.js';
import { until } from '../support/wait.js';

// sleep: the helper for the waits below whose duration is the point (a kill's window, a storm's spacing).
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** The error a promise rejects with; fails the test if it resolves. */
async function failure(promise: Promise<unknown>): Promise<{ code?: string; message: string }> {
  try {
    await promise;
  } catch (error) {
    return error as { code?: string; message: string };
  }
  throw new Error('expected a rejection');
}

// Without a listener on a checked-out client, a terminated backend is an unhandled 'error' event:
// the process (here, the vitest worker) crashes and vitest fails the run as an unhandled error.
describe('a terminated PostgreSQL connection', () => {
  const schema = freshSchema();
  const app = `oncely_lost_${randomUUID().slice(0, 8)}`;
  let db: Db & StatementCache;
  const admin = new pg.Client({ connectionString: POSTGRES_URL });
  const kill = (pid: number) => admin.query('SELECT pg_terminate_backend($1)', [pid]);
  const pidOf = async (tx: Sql) => (await tx.all<{ pid: number }>('SELECT pg_backend_pid() AS pid'))[0]?.pid ?? 0;
  /** Every backend of this test's pool, idle or busy. */
  const backends = async () =>
    (
      await admin.query<{ pid: number; query: string }>(
        'SELECT pid, query FROM pg_stat_activity WHERE application_name = $1',
        [app],
      )
    ).rows;

  beforeAll(async () => {
    await admin.connect();
    db = await openPostgres(`${POSTGRES_URL}?schema=${schema}&application_name=${app}`, { poolSize: 3 });
    await db.exec('CREATE TABLE notes (id text PRIMARY KEY)');
  });
  afterAll(async () => {
    await db?.close();
    await admin.end();
    await dropSchema(schema);
  });

  it('defect 11.5: a backend terminated mid-transaction rejects with STORE_UNAVAILABLE, and the next call succeeds', async () => {
    // Killed while idle in the transaction: the client's 'error' arrives between statements.
    const idle = await failure(
      db.transaction(async (tx) => {
        await tx.run('INSERT INTO notes (id) VALUES (?)', ['lost-1']);
        await kill(await pidOf(tx));
        // sleep: lets the terminated backend's error reach the idle client between statements, this case's window.
        await sleep(200);
        await tx.all('SELECT 1');
      }),
    );
    expect(idle.code).toBe('STORE_UNAVAILABLE');
    // Killed while a statement of the transaction runs.
    const busy = await failure(
      db.transaction(async (tx) => {
        const pid = await pidOf(tx);
        setTimeout(() => void kill(pid), 100);
        await tx.all('SELECT pg_sleep(5)');
      }),
    );
    expect(busy.code).toBe('STORE_UNAVAILABLE');
    // Killed while a statement outside a transaction runs on a pool connection.
    // Its rejection is taken at once: it may land while the kill's own answer is still awaited.
    const pooled = failure(db.all('SELECT pg_sleep(4.5)'));
    const [sleeping] = await until(
      'the pooled pg_sleep(4.5) to show in pg_stat_activity',
      async () => (await backends()).filter((b) => b.query === 'SELECT pg_sleep(4.5)'),
      (found) => found.length > 0,
    );
    await kill(sleeping?.pid ?? 0);
    expect((await pooled).code).toBe('STORE_UNAVAILABLE');
    // Nothing of the lost transaction committed, and the pool serves on fresh connections.
    expect(await db.transaction((tx) => tx.all('SELECT id FROM notes'))).toEqual([]);
    await db.transaction((tx) => tx.run('INSERT INTO notes (id) VALUES (?)', ['kept']));
    expect(await db.all('SELECT id FROM notes')).toEqual([{ id: 'kept' }]);
    const pids = new Set((await backends()).map((b) => b.pid));
    expect(pids.size).toBeLessThanOrEqual(3);
  });

  it('defect 11.5: a storm of pg_terminate_backend never crashes the process; every failure is STORE_UNAVAILABLE', async () => {
    // Kills land at any moment: mid-statement, between statements, and right after a statement's
    // answer, in the same socket read that hands the connection to the next caller.
    const outcomes = { ok: 0, unavailable: 0, other: [] as unknown[] };
    const end = Date.now() + 3_000;
    const caller = async () => {
      while (Date.now() < end) {
        try {
          if (Math.random() < 0.5) {
            await db.transaction(async (tx) => {
              await tx.all('SELECT 1');
              await tx.all('SELECT pg_sleep(0.01)');
              await tx.all('SELECT 2');
            });
          } else await db.all('SELECT pg_sleep(0.005)');
          outcomes.ok++;
        } catch (error) {
          if ((error as { code?: string }).code === 'STORE_UNAVAILABLE') outcomes.unavailable++;
          else outcomes.other.push(error);
        }
      }
    };
    const killer = async () => {
      while (Date.now() < end) {
        for (const b of await backends()) await kill(b.pid);
        // sleep: kills spaced at random, so they land at any moment of the callers' work.
        await sleep(30 + Math.random() * 50);
      }
    };
    await Promise.all([caller(), caller(), caller(), caller(), caller(), caller(), killer()]);
    expect(outcomes.other).toEqual([]);
    expect(outcomes.unavailable).toBeGreaterThan(0);
    expect(outcomes.ok).toBeGreaterThan(0);
    expect(await db.all('SELECT 1 AS one')).toEqual([{ one: 1 }]);
  });

  it('defect 11.5: poolSize bounds the connections of the pool', async () => {
    let open = 0;
    let most = 0;
    await Promise.all(
      Array.from({ length: 8 }, () =>
        db.transaction(async (tx) => {
          most = Math.max(most, ++open);
          await tx.all('SELECT pg_sleep(0.05)');
          open--;
        }),
      ),
    );
    expect(most).toBe(3);
    expect((await backends()).length).toBeLessThanOrEqual(3);
  });

  it('defect 11.5: flows keep running when their connections are terminated', async () => {
    // The next transaction of the flows (the signal below) has its backend killed inside it.
    let armed = false;
    const flowsDb: Db = {
      ...db,
      transaction: (fn) =>
        db.transaction(async (tx) => {
          if (armed) {
            armed = false;
            await kill(await pidOf(tx));
            // sleep: lets the terminated backend's error reach the client before the flows' statements.
            await sleep(200);
          }
          return fn(tx);
        }),
    };
    const name = `lost-${randomUUID().slice(0, 8)}`;
    const steps: string[] = [];
    const flow = defineFlow<{ id: string }, string>(name, { seed: ['id'] }, async (run) => {
      await run.step('first', async () => {
        // On its first run, every connection of the pool dies while the step runs, the worker's own
        // included (once: a run that lost its connections runs the step again after the lease).
        if (steps.push('first') === 1) for (const b of await backends()) await kill(b.pid);
        return 'one';
      });
      const go = await run.waitFor<{ ok: boolean }>('go', { timeout: '1m' });
      return run.step('second', async () => {
        steps.push('second');
        return `done ${go?.ok}`;
      });
    });
    const flows = await createFlows({ db: flowsDb, flows: [flow], poll: '20ms', lease: '1s' });
    await flows.startWorker();
    try {
      const { workflowId } = await flows.start(flow, { id: 'F-1' });
      await until('the flow to wait for its signal', async () => (await flows.get(workflowId))?.status === 'waiting');
      armed = true;
      expect((await failure(flows.signal(workflowId, 'go', { ok: true }, { signalId: 'go-1' }))).code).toBe(
        'STORE_UNAVAILABLE',
      );
      expect(await flows.signal(workflowId, 'go', { ok: true }, { signalId: 'go-1' })).toBe(true);
      expect(
        await until('the flow to complete', async () => (await flows.get(workflowId))?.status === 'completed'),
      ).toBe(true);
      expect(await flows.result(workflowId)).toBe('done true');
      expect(steps.filter((s) => s === 'second')).toEqual(['second']);
    } finally {
      await flows.stop();
    }
  });
});
