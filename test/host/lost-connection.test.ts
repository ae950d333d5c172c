import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { HandlerModule } from '../../src/host/app.js';
import { type RunningHost, startHost } from '../support/host-app.js';
import { dropSchema, freshSchema, POSTGRES_URL } from '../support/postgres.js';

const SCHEMA = 'CREATE TABLE IF NOT EXISTS lostconn_marks (id TEXT PRIMARY KEY)';

/** Writes a mark, then has its own backend terminated from another connection (a failover, a restart). */
const doomed: HandlerModule = {
  async handle(input, ctx) {
    const { id } = input as { id: string };
    await ctx.store.createIfAbsent('lostconn_marks', { id }, ['id']);
    // This transaction's backend is the one holding a lock on the table it just wrote (a name no other test uses).
    const killer = new pg.Client({ connectionString: POSTGRES_URL });
    await killer.connect();
    const killed = await killer.query(
      `SELECT DISTINCT pg_terminate_backend(l.pid) FROM pg_locks l JOIN pg_class c ON c.oid = l.relation
       WHERE c.relname = 'lostconn_marks' AND l.pid <> pg_backend_pid()`,
    );
    await killer.end();
    if (killed.rowCount !== 1) throw new Error(`expected to terminate one backend, terminated ${killed.rowCount}`);
    await ctx.store.createIfAbsent('lostconn_marks', { id: `${id}:after` }, ['id']);
    return { id };
  },
};

const fine: HandlerModule = {
  async handle(input, ctx) {
    const { id } = input as { id: string };
    await ctx.store.createIfAbsent('lostconn_marks', { id }, ['id']);
    return { id };
  },
};

describe('host on PostgreSQL: a lost connection', () => {
  const schema = freshSchema();
  let app: RunningHost;
  beforeAll(async () => {
    app = await startHost(`${POSTGRES_URL}?schema=${schema}`, {
      schemaSql: SCHEMA,
      handlers: { 'marks.doomed': doomed, 'marks.fine': fine },
    });
  });
  afterAll(async () => {
    await app?.stop();
    await dropSchema(schema);
  });

  it('defect 11.5: a handler whose backend is terminated answers 503 STORE_UNAVAILABLE, rolls back, and the host keeps serving', async () => {
    const lost = await app.invoke('marks.doomed', { id: 'm-1' }, { 'idempotency-key': '"lost-1"' });
    expect(lost.status).toBe(503);
    expect(lost.headers.get('retry-after')).toBe('1');
    expect(lost.body).toMatchObject({ code: 503, error: { code: 'STORE_UNAVAILABLE' } });
    expect(await app.rows('SELECT id FROM lostconn_marks')).toEqual([]);
    // The same process answers the next requests, the retried key included.
    const next = await app.invoke('marks.fine', { id: 'm-2' }, { 'idempotency-key': '"fine-1"' });
    expect(next).toMatchObject({ status: 200, body: { code: 0, data: { id: 'm-2' } } });
    const retried = await app.invoke('marks.fine', { id: 'm-1' }, { 'idempotency-key': '"lost-1"' });
    expect(retried.status).toBe(200);
  });
});
