import pg from 'pg';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import type { HandlerModule } from '../../src/host/app.js';
import type { HostContext, HostEvent } from '../../src/host/index.js';
import { hostTargets, type RunningHost, sleep, startHost, type TestApp } from '../support/host-app.js';
import { until } from '../support/wait.js';

const SCHEMA = 'CREATE TABLE IF NOT EXISTS marks (id TEXT PRIMARY KEY, note TEXT NOT NULL)';

const mark = async (ctx: HostContext, id: string, note: string) => {
  const written = await ctx.store.createIfAbsent('marks', { id, note }, ['id']);
  if (!written.ok) throw new Error(written.error.message);
};

/** The ids a slow handler is running for, and those whose run ended (its late write tried), seen from the test. */
const running = new Set<string>();
const ended = new Set<string>();

/** Writes a mark, waits `ms`, then writes another: past its timeout neither may survive. */
const slow: HandlerModule = {
  timeout: '400ms',
  async handle(input, ctx) {
    const { id, ms } = input as { id: string; ms: number };
    running.add(id);
    try {
      await mark(ctx, `${id}:before`, 'slow');
      // sleep: the handler runs this long, past its timeout or not, which is what these tests are about.
      await sleep(ms);
      await mark(ctx, `${id}:after`, 'slow, late');
      return { id };
    } finally {
      ended.add(id);
    }
  },
};

/** The same, with room to show what happens while it runs: 3 s before it times out. */
const long: HandlerModule = { ...slow, timeout: '3s' };

const fast: HandlerModule = {
  async handle(input, ctx) {
    const { id } = input as { id: string };
    await mark(ctx, id, 'fast');
    return { id };
  },
};

/** Its first attempt outlives its timeout (writing first); the retry is quick. */
const flakyConsumer = {
  timeout: '300ms',
  async handle(event: HostEvent, ctx: HostContext) {
    await mark(ctx, `${event.id}:${event.attempt}`, 'consumer');
    // sleep: the first attempt outlives its 300 ms timeout.
    if (event.attempt === 1) await sleep(1500);
    ended.add(`${event.id}:${event.attempt}`);
  },
} as const;

/** Updates a row someone else may hold locked: its statement waits on the lock. */
const locked: HandlerModule = {
  timeout: '400ms',
  async handle(_input, ctx) {
    const updated = await ctx.store.update('marks', { id: 'locked' }, { note: 'updated' });
    if (!updated.ok) throw new Error(updated.error.message);
    return updated.data;
  },
};

const APP: TestApp = {
  config: { timeout: '5s', events: { maxAttempts: 3, backoff: 10, lease: '10s' } },
  schemaSql: SCHEMA,
  handlers: { 'work.slow': slow, 'work.long': long, 'work.fast': fast, 'work.locked': locked },
  consumers: { 'jobs/flaky': flakyConsumer },
};

const targets = hostTargets();
afterAll(async () => {
  for (const t of targets) await t.cleanup();
});

const timed = async <T>(fn: () => Promise<T>) => {
  const started = Date.now();
  const value = await fn();
  return { value, ms: Date.now() - started };
};

for (const { name, target } of targets)
  describe(`host timeouts on ${name}`, () => {
    let app: RunningHost;
    let url: string;
    beforeAll(async () => {
      url = target();
      // A pool of 2: one slow request and its duplicates must not starve everyone else.
      app = await startHost(url, APP, { poolSize: 2 });
    });
    afterAll(() => app.stop());
    // The ids repeat on each store; a handler left running by an earlier test only ever adds its own.
    beforeEach(() => {
      running.clear();
      ended.clear();
    });

    const ids = async (prefix: string) =>
      (await app.rows<{ id: string }>('SELECT id FROM marks WHERE id LIKE ? ORDER BY id', [`${prefix}%`])).map(
        (r) => r.id,
      );

    it('defect 11.12: a slow handler times out with 503 HANDLER_TIMEOUT and rolls back, late writes included', async () => {
      const { value: answer, ms } = await timed(() =>
        app.invoke('work.slow', { id: 't1', ms: 2000 }, { 'idempotency-key': 't1' }),
      );
      expect(answer).toMatchObject({ status: 503, body: { error: { code: 'HANDLER_TIMEOUT' } } });
      expect(answer.headers.get('retry-after')).toBe('1');
      expect(ms).toBeLessThan(1500);
      // The handler goes on in the background; its write after the deadline is refused, not committed.
      await until('the timed-out handler to end, its late write tried', () => ended.has('t1'), undefined, {
        timeoutMs: 20_000,
      });
      expect(await ids('t1')).toEqual([]);
      // Nothing was kept, so the key is free: the retry executes.
      const retry = await app.invoke('work.slow', { id: 't1', ms: 0 }, { 'idempotency-key': 't1' });
      expect(retry).toMatchObject({ status: 200, body: { data: { id: 't1' } } });
      expect(await ids('t1')).toEqual(['t1:after', 't1:before']);
    });

    it('defect 11.12: other requests are served while a slow handler runs', async () => {
      const stuck = app.invoke('work.long', { id: 't2', ms: 10_000 }, { 'idempotency-key': 't2' });
      await until('the slow handler running', () => running.has('t2'));
      const health = await timed(() => fetch(`${app.base}/v1/health`).then((r) => r.status));
      expect(health.value).toBe(200);
      expect(health.ms).toBeLessThan(1000);
      const other = await timed(() => app.invoke('work.fast', { id: 't2-other' }, { 'idempotency-key': 't2-other' }));
      expect(other.value.status).toBe(200);
      // PostgreSQL serves it beside the slow one (before its 3 s timeout); SQLite holds one write
      // lock, so it waits at most that timeout, never the 10 s the handler would take.
      expect(other.ms).toBeLessThan(name === 'postgres' ? 2000 : 6000);
      expect((await stuck).status).toBe(503);
    });

    it('defect 11.12: duplicates of a running key get 409 IN_PROGRESS at once and hold no connection', async () => {
      const first = app.invoke('work.long', { id: 't3', ms: 1500 }, { 'idempotency-key': 't3' });
      await until('the first call running', () => running.has('t3'));
      const { value: duplicates, ms } = await timed(() =>
        Promise.all(
          Array.from({ length: 12 }, () =>
            app.invoke('work.long', { id: 't3', ms: 1500 }, { 'idempotency-key': 't3' }),
          ),
        ),
      );
      for (const d of duplicates) expect(d).toMatchObject({ status: 409, body: { error: { code: 'IN_PROGRESS' } } });
      expect(duplicates[0]?.headers.get('retry-after')).toBe('1');
      expect(ms).toBeLessThan(1000);
      // With a pool of 2, twelve duplicates waiting on the unique index would stall this one.
      const other = await timed(() => app.invoke('work.fast', { id: 't3-other' }, { 'idempotency-key': 't3-other' }));
      expect(other.value.status).toBe(200);
      expect(other.ms).toBeLessThan(name === 'postgres' ? 1000 : 3000);
      expect((await first).status).toBe(200);
      const replay = await app.invoke('work.long', { id: 't3', ms: 1500 }, { 'idempotency-key': 't3' });
      expect(replay.headers.get('idempotent-replayed')).toBe('true');
    });

    it('defect 11.12: a consumer past its timeout rolls back and is retried with backoff', async () => {
      await app.host.events.intake('jobs', 'job-1', 'flaky', {});
      await until(
        'attempt 2 applied',
        () => ids('job-1'),
        (marks) => marks.length > 0,
      );
      await until('attempt 1 run to its end, past its timeout', () => ended.has('job-1:1'));
      // Attempt 1 wrote its mark, then ran past 300 ms: rolled back. Attempt 2 applied once.
      expect(await ids('job-1')).toEqual(['job-1:2']);
      const stats = (await (await fetch(`${app.base}/v1/events/stats`)).json()) as { data: Record<string, number> };
      expect(stats.data).toMatchObject({ retrying: 1, applied: 1 });
    });

    if (name === 'postgres')
      it('defect 11.12: a duplicate on another host is answered 409 without waiting on the unique index', async () => {
        const other = await startHost(url, APP, { poolSize: 2 });
        try {
          const first = app.invoke('work.long', { id: 't4', ms: 1500 }, { 'idempotency-key': 't4' });
          await until('the first call running', () => running.has('t4'));
          const { value: duplicate, ms } = await timed(() =>
            other.invoke('work.long', { id: 't4', ms: 1500 }, { 'idempotency-key': 't4' }),
          );
          expect(duplicate).toMatchObject({ status: 409, body: { error: { code: 'IN_PROGRESS' } } });
          expect(ms).toBeLessThan(1000);
          expect((await first).status).toBe(200);
          expect(
            (await other.invoke('work.long', { id: 't4', ms: 1500 }, { 'idempotency-key': 't4' })).headers.get(
              'idempotent-replayed',
            ),
          ).toBe('true');
        } finally {
          await other.stop();
        }
      });

    if (name === 'postgres')
      it('defect 11.12: a handler stuck in a statement past its timeout frees its connection (statement_timeout)', async () => {
        await app.invoke('work.fast', { id: 'locked' }, { 'idempotency-key': 'locked-row' });
        const holder = new pg.Client({ connectionString: url.replace(/\?schema=.*/, '') });
        await holder.connect();
        try {
          const schema = new URL(url).searchParams.get('schema');
          await holder.query('BEGIN');
          await holder.query(`SELECT id FROM "${schema}".marks WHERE id = 'locked' FOR UPDATE`);
          const { value: answer, ms } = await timed(() =>
            app.invoke('work.locked', {}, { 'idempotency-key': 'locked-1' }),
          );
          expect(answer).toMatchObject({ status: 503, body: { error: { code: 'HANDLER_TIMEOUT' } } });
          expect(ms).toBeLessThan(1500);
          // The lock is still held, yet both pooled connections serve again.
          const others = await Promise.all(
            ['l-a', 'l-b', 'l-c'].map((id) => app.invoke('work.fast', { id }, { 'idempotency-key': id })),
          );
          expect(others.map((o) => o.status)).toEqual([200, 200, 200]);
        } finally {
          await holder.query('ROLLBACK');
          await holder.end();
        }
        expect((await app.rows<{ note: string }>("SELECT note FROM marks WHERE id = 'locked'"))[0]?.note).toBe('fast');
      });
  });
