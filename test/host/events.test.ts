import { spawn } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { afterAll, afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { OncelyLogger } from '../../src/core/observer.js';
import { openDb } from '../../src/db/index.js';
import { openPostgres } from '../../src/db/postgres.js';
import { openSqlite } from '../../src/db/sqlite.js';
import type { Db, Sql } from '../../src/db/types.js';
import { backoffDelay, type ConsumerBinding, EventQueue, type EventQueueOptions } from '../../src/host/events.js';
import type { HostEvent } from '../../src/host/types.js';
import { dropSchema, freshSchema, POSTGRES_URL } from '../support/postgres.js';
import { SELECTED_STORES, selectStores } from '../support/store-filter.js';
import { until } from '../support/wait.js';

/** One database per test: a SQLite file, or a PostgreSQL schema chosen by search_path. */
interface Target {
  /** What `openDb` takes: a file path or a URL. */
  url: string;
  open(): Promise<Db>;
  dispose(): Promise<void>;
}

async function sqliteTarget(): Promise<Target> {
  const url = join(mkdtempSync(join(tmpdir(), 'oncely-events-')), 'app.db');
  return { url, open: async () => openSqlite(url), dispose: async () => {} };
}

async function postgresTarget(): Promise<Target> {
  const schema = freshSchema();
  // openPostgres creates the schema and puts it first on every connection's search_path.
  const url = `${POSTGRES_URL}?schema=${schema}`;
  return { url, open: () => openPostgres(url), dispose: () => dropSchema(schema) };
}

const EFFECTS = 'CREATE TABLE IF NOT EXISTS effects (event_id TEXT NOT NULL, by_worker TEXT NOT NULL, note TEXT)';

/** The consumer's effect: a row written in the event's transaction, so it commits with the outcome. */
const effect = (tx: Sql, event: HostEvent, note: unknown = null, by = 'test') =>
  tx.run('INSERT INTO effects (event_id, by_worker, note) VALUES (?, ?, ?)', [event.id, by, note]);

const effects = async (db: Db) =>
  db.all<{ event_id: string; by_worker: string; note: string | null }>(
    'SELECT event_id, by_worker, note FROM effects ORDER BY event_id, note',
  );

/** A structured logger that keeps what it was told, so a test can assert on reported failures. */
function recordingLogger() {
  const errors: { message: string; fields?: Record<string, unknown> }[] = [];
  const logger: OncelyLogger = {
    info: () => {},
    warn: () => {},
    error: (fields, message) => void errors.push({ message, fields }),
  };
  return { logger, errors };
}

const consume = (handle: ConsumerBinding['handle'], ordering?: ConsumerBinding['ordering']): ConsumerBinding => ({
  handle,
  ordering,
});

function describeQueue(dialect: 'sqlite' | 'postgres', makeTarget: () => Promise<Target>) {
  describe(`event queue on ${dialect}`, () => {
    let target: Target;
    const opened: Db[] = [];
    const children: ReturnType<typeof holdInChild>[] = [];
    const open = async () => {
      const db = await target.open();
      opened.push(db);
      return db;
    };
    const queueOn = async (
      db: Db,
      consumers: Record<string, ConsumerBinding>,
      options: Partial<EventQueueOptions> = {},
    ) => {
      const queue = new EventQueue(db, {
        consumerFor: (source, type) => consumers[`${source}/${type}`],
        baseDelayMs: 5,
        maxDelayMs: 20,
        pollMs: 20,
        ...options,
      });
      await queue.migrate();
      await db.exec(EFFECTS);
      return queue;
    };

    beforeEach(async () => {
      target = await makeTarget();
    });
    afterEach(async () => {
      for (const child of children.splice(0)) await child.kill();
      for (const db of opened.splice(0)) await db.close();
      await target.dispose();
    });

    it('stores an event once: the second intake is a counted duplicate', async () => {
      const db = await open();
      const queue = await queueOn(db, {});
      expect(await queue.intake('shop', 'evt-1', 'order.paid', { orderId: 'ORD-1' })).toBe('accepted');
      expect(await queue.intake('shop', 'evt-1', 'order.paid', { orderId: 'ORD-1' })).toBe('duplicate');
      expect(await queue.intake('other', 'evt-1', 'order.paid', {})).toBe('accepted');
      const stored = await queue.get('shop', 'evt-1');
      expect(stored).toMatchObject({ status: 'pending', attempts: 0, type: 'order.paid', data: { orderId: 'ORD-1' } });
      expect(await db.all('SELECT * FROM oncely_events')).toHaveLength(2);
      expect(await queue.stats()).toEqual({
        accepted: 2,
        duplicate: 1,
        conflict: 0,
        applied: 0,
        stale: 0,
        retrying: 0,
        dead_lettered: 0,
        replayed_from_dead_letter: 0,
        deferred: 0,
      });
      await expect(queue.intake('shop', '', 'x', {})).rejects.toMatchObject({ code: 'KEY_REQUIRED' });
    });

    it('runs the consumer once and marks the event applied', async () => {
      const db = await open();
      const seen: HostEvent[] = [];
      const queue = await queueOn(db, {
        'shop/order.paid': consume(async (event, tx) => {
          seen.push(event);
          await effect(tx, event);
        }),
      });
      await queue.intake('shop', 'evt-1', 'order.paid', { orderId: 'ORD-1' });
      await queue.intake('shop', 'evt-1', 'order.paid', { orderId: 'ORD-1' });
      await queue.drain();
      await queue.drain();
      expect(seen).toHaveLength(1);
      expect(seen[0]).toMatchObject({ id: 'evt-1', source: 'shop', type: 'order.paid', attempt: 1 });
      expect(seen[0]?.data).toEqual({ orderId: 'ORD-1' });
      expect(await effects(db)).toEqual([{ event_id: 'evt-1', by_worker: 'test', note: null }]);
      expect(await queue.get('shop', 'evt-1')).toMatchObject({ status: 'applied', attempts: 1, leaseUntil: null });
      expect(await queue.stats()).toMatchObject({ accepted: 1, duplicate: 1, applied: 1 });
    });

    it('retries a failing consumer with backoff; its writes of failed attempts roll back', async () => {
      const db = await open();
      const attempts: number[] = [];
      const { logger, errors } = recordingLogger();
      const queue = await queueOn(
        db,
        {
          'shop/order.paid': consume(async (event, tx) => {
            attempts.push(event.attempt);
            await effect(tx, event, `attempt ${event.attempt}`);
            if (event.attempt < 3) throw new Error(`gateway timeout ${event.attempt}`);
          }),
        },
        { logger },
      );
      await queue.intake('shop', 'evt-1', 'order.paid', {});
      await queue.drain();
      expect(attempts).toEqual([1, 2, 3]);
      expect(await effects(db)).toEqual([{ event_id: 'evt-1', by_worker: 'test', note: 'attempt 3' }]);
      // Each failed attempt was reported; last_error is cleared once the event applies.
      expect(errors.map((e) => [e.fields?.attempt, e.fields?.error])).toEqual([
        [1, 'Error: gateway timeout 1'],
        [2, 'Error: gateway timeout 2'],
      ]);
      expect(await queue.get('shop', 'evt-1')).toMatchObject({ status: 'applied', attempts: 3, lastError: null });
      expect(await queue.stats()).toMatchObject({ applied: 1, retrying: 2, dead_lettered: 0 });
    });

    it('dead-letters after maxAttempts with the last error, and replays with the same event id', async () => {
      const db = await open();
      let broken = true;
      const seen: HostEvent[] = [];
      const queue = await queueOn(
        db,
        {
          'shop/order.paid': consume(async (event, tx) => {
            seen.push(event);
            if (broken) throw new TypeError(`cannot read sku of ${event.id}`);
            await effect(tx, event);
          }),
        },
        { maxAttempts: 4 },
      );
      await queue.intake('shop', 'evt-1', 'order.paid', {});
      await queue.intake('shop', 'evt-2', 'order.paid', {});
      await queue.drain();
      const dead = await queue.deadLetters();
      expect(dead.map((d) => d.id)).toEqual(['shop/evt-1', 'shop/evt-2']);
      expect(dead[0]).toMatchObject({
        source: 'shop',
        eventId: 'evt-1',
        type: 'order.paid',
        attempts: 4,
        lastError: 'TypeError: cannot read sku of evt-1',
      });
      expect(await queue.stats()).toMatchObject({ retrying: 6, dead_lettered: 2, applied: 0 });
      expect(seen).toHaveLength(8);

      broken = false;
      seen.length = 0;
      expect(await queue.replay([{ source: 'shop', id: 'evt-1' }])).toBe(1);
      expect(await queue.replay([{ source: 'shop', id: 'evt-1' }])).toBe(0);
      await queue.drain();
      expect(seen.map((e) => [e.id, e.attempt])).toEqual([['evt-1', 1]]);
      expect(await queue.replay('all')).toBe(1);
      await queue.drain();
      expect(seen.map((e) => e.id)).toEqual(['evt-1', 'evt-2']);
      expect(await queue.deadLetters()).toEqual([]);
      expect((await effects(db)).map((e) => e.event_id)).toEqual(['evt-1', 'evt-2']);
      expect(await queue.stats()).toMatchObject({ applied: 2, dead_lettered: 2, duplicate: 0 });
    });

    it('drops an event older than (or as old as) its aggregate’s stored version as stale', async () => {
      const db = await open();
      const ordering = {
        aggregate: (e: HostEvent) => `order:${(e.data as { orderId: string }).orderId}`,
        version: (e: HostEvent) => (e.data as { version: number }).version,
      };
      const handle = async (event: HostEvent, tx: Sql) => effect(tx, event, event.type).then(() => undefined);
      const queue = await queueOn(db, {
        'shop/order.refunded': consume(handle, ordering),
        'shop/order.paid': consume(handle, ordering),
      });
      // The refund (version 2) arrives before the payment (version 1).
      await queue.intake('shop', 'evt-refund', 'order.refunded', { orderId: 'ORD-1', version: 2 });
      await queue.drain();
      await queue.intake('shop', 'evt-paid', 'order.paid', { orderId: 'ORD-1', version: 1 });
      await queue.intake('shop', 'evt-refund-again', 'order.refunded', { orderId: 'ORD-1', version: 2 });
      await queue.intake('shop', 'evt-other', 'order.paid', { orderId: 'ORD-2', version: 1 });
      await queue.drain();
      expect((await queue.get('shop', 'evt-refund'))?.status).toBe('applied');
      expect((await queue.get('shop', 'evt-paid'))?.status).toBe('stale');
      expect((await queue.get('shop', 'evt-refund-again'))?.status).toBe('stale');
      expect((await queue.get('shop', 'evt-other'))?.status).toBe('applied');
      expect((await effects(db)).map((e) => e.event_id)).toEqual(['evt-other', 'evt-refund']);
      expect(await db.all('SELECT aggregate, version FROM oncely_event_versions ORDER BY aggregate')).toEqual([
        { aggregate: 'order:ORD-1', version: dialect === 'postgres' ? '2' : 2 },
        { aggregate: 'order:ORD-2', version: dialect === 'postgres' ? '1' : 1 },
      ]);
      expect(await queue.stats()).toMatchObject({ applied: 2, stale: 2 });
    });

    it('keeps an event without a consumer as no_consumer, not as an error', async () => {
      const db = await open();
      const queue = await queueOn(db, {});
      await queue.intake('shop', 'evt-1', 'order.shipped', {});
      await queue.drain();
      expect(await queue.get('shop', 'evt-1')).toMatchObject({ status: 'no_consumer', attempts: 1, lastError: null });
      expect(await queue.deadLetters()).toEqual([]);
    });

    it('consumes in the background once started, and stop() waits for the event in flight', async () => {
      const db = await open();
      let release: () => void = () => {};
      const started = new Promise<void>((resolve) => {
        release = resolve;
      });
      const queue = await queueOn(db, {
        'shop/order.paid': consume(async (event, tx) => {
          release();
          // sleep: the event stays in flight a while, for stop() to wait for.
          await new Promise((r) => setTimeout(r, 200));
          await effect(tx, event);
        }),
      });
      queue.start();
      await queue.intake('shop', 'evt-1', 'order.paid', {});
      await started;
      await queue.stop();
      expect((await queue.get('shop', 'evt-1'))?.status).toBe('applied');
      await queue.intake('shop', 'evt-2', 'order.paid', {});
      // sleep: a window in which a stopped queue must not take the event.
      await new Promise((r) => setTimeout(r, 100));
      expect((await queue.get('shop', 'evt-2'))?.status).toBe('pending');
    });

    it('gives an event whose worker was killed mid-consumer to another worker after the lease, applied once', async () => {
      const db = await open();
      const queue = await queueOn(db, {
        'shop/order.paid': consume((event, tx) => effect(tx, event, null, 'survivor').then(() => undefined)),
      });
      await queue.intake('shop', 'evt-1', 'order.paid', {});
      const child = holdInChild(target.url, 1_000);
      children.push(child);
      await child.holding;
      expect((await queue.get('shop', 'evt-1'))?.status).toBe('processing');
      await child.kill();
      const before = Date.now();
      await queue.drain(10_000);
      expect(Date.now() - before).toBeLessThan(5_000);
      expect(await effects(db)).toEqual([{ event_id: 'evt-1', by_worker: 'survivor', note: null }]);
      expect(await queue.get('shop', 'evt-1')).toMatchObject({ status: 'applied', attempts: 2, lastError: null });
    });

    it('dead-letters an event whose worker died in every attempt, without running it again', async () => {
      const db = await open();
      let ran = 0;
      const queue = await queueOn(
        db,
        {
          'shop/order.paid': consume(async () => {
            ran++;
          }),
        },
        { maxAttempts: 3 },
      );
      await queue.intake('shop', 'evt-1', 'order.paid', {});
      // As three workers that each claimed it and died would leave it.
      await db.run(
        "UPDATE oncely_events SET status = 'processing', attempts = 3, lease_until = ? WHERE event_id = 'evt-1'",
        [Date.now() - 1],
      );
      await queue.drain();
      expect(ran).toBe(0);
      expect(await queue.deadLetters()).toMatchObject([
        {
          eventId: 'evt-1',
          attempts: 4,
          lastError: 'Error: the worker of attempt 3 (the last) stopped before finishing it',
        },
      ]);
    });

    if (dialect === 'postgres') {
      it('does not give a slow consumer’s event to another worker while its transaction is open, even past the lease', async () => {
        const [a, b] = [await open(), await open()];
        const ran: string[] = [];
        const slow = consume(async (event, tx) => {
          ran.push('a');
          // sleep: the transaction stays open past the 200 ms lease, which is what this test is about.
          await new Promise((r) => setTimeout(r, 800));
          await effect(tx, event, null, 'a');
        });
        const fast = consume(async (event, tx) => {
          ran.push('b');
          await effect(tx, event, null, 'b');
        });
        const qa = await queueOn(a, { 'shop/order.paid': slow }, { leaseMs: 200 });
        const qb = await queueOn(b, { 'shop/order.paid': fast }, { leaseMs: 200 });
        await qa.intake('shop', 'evt-1', 'order.paid', {});
        const first = qa.drain();
        await until('worker a running the event', () => ran.includes('a'));
        // sleep: past the 200 ms lease, with a's transaction still open.
        await new Promise((r) => setTimeout(r, 400));
        await qb.drain();
        await first;
        expect(ran).toEqual(['a']);
        expect(await effects(a)).toEqual([{ event_id: 'evt-1', by_worker: 'a', note: null }]);
        expect(await qa.get('shop', 'evt-1')).toMatchObject({ status: 'applied', attempts: 1 });
      });

      it('shares 200 events between two queues on separate connections without applying any twice', async () => {
        const [a, b] = [await open(), await open()];
        const applied = { a: 0, b: 0 };
        const binding = (name: 'a' | 'b') =>
          consume(async (event, tx) => {
            applied[name]++;
            await effect(tx, event, null, name);
            // sleep: a little time per event, so the two queues interleave.
            await new Promise((r) => setTimeout(r, 2));
          });
        const qa = await queueOn(a, { 'shop/order.paid': binding('a') }, { batchSize: 8 });
        const qb = await queueOn(b, { 'shop/order.paid': binding('b') }, { batchSize: 8 });
        for (let i = 0; i < 200; i += 20)
          await Promise.all(
            Array.from({ length: 20 }, (_, j) =>
              qa.intake('shop', `evt-${String(i + j).padStart(3, '0')}`, 'order.paid', {}),
            ),
          );
        await Promise.all([qa.drain(), qb.drain()]);
        const rows = await effects(a);
        expect(rows).toHaveLength(200);
        expect(new Set(rows.map((r) => r.event_id)).size).toBe(200);
        expect(applied.a + applied.b).toBe(200);
        expect(applied.a).toBeGreaterThan(0);
        expect(applied.b).toBeGreaterThan(0);
        expect(await qb.stats()).toMatchObject({ accepted: 200, applied: 200, retrying: 0 });
      });
    }
  });
}

/**
 * A second process whose consumer writes its effect, then hangs holding the event's transaction
 * until it is killed.
 */
function holdInChild(url: string, leaseMs: number) {
  const events = new URL('../../src/host/events.ts', import.meta.url).href;
  const dbIndex = new URL('../../src/db/index.ts', import.meta.url).href;
  const code = `
    import { EventQueue } from ${JSON.stringify(events)};
    import { openDb } from ${JSON.stringify(dbIndex)};
    const db = await openDb(process.env.ONCELY_TEST_DB);
    const queue = new EventQueue(db, {
      leaseMs: ${leaseMs},
      pollMs: 20,
      consumerFor: () => ({
        async handle(event, tx) {
          await tx.run('INSERT INTO effects (event_id, by_worker) VALUES (?, ?)', [event.id, 'killed']);
          console.log('holding');
          await new Promise(() => {});
        },
      }),
    });
    queue.start();`;
  const child = spawn(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', code], {
    env: { ...process.env, ONCELY_TEST_DB: url },
  });
  let stderr = '';
  child.stderr.on('data', (chunk) => {
    stderr += chunk;
  });
  const exited = new Promise<void>((resolve) => child.on('exit', () => resolve()));
  const holding = new Promise<void>((resolve, reject) => {
    createInterface({ input: child.stdout }).on('line', (line) => line === 'holding' && resolve());
    void exited.then(() => reject(new Error(`child exited before holding the event: ${stderr}`)));
  });
  return {
    holding,
    /** SIGKILL, resolved once the process is gone (its connections and SQLite locks with it). */
    kill: async () => {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
      await exited;
    },
  };
}

describe('backoffDelay', () => {
  it('draws uniformly below a ceiling that doubles per attempt up to the cap', () => {
    const ceilings = Array.from({ length: 10 }, (_, i) => backoffDelay(i + 1, 100, 5_000, () => 0.999_999_9));
    expect(ceilings).toEqual([99, 199, 399, 799, 1599, 3199, 4999, 4999, 4999, 4999]);
    for (let attempt = 1; attempt <= 10; attempt++) expect(backoffDelay(attempt, 100, 5_000, () => 0)).toBe(0);
    expect(backoffDelay(1_000, 100, 5_000, () => 0.5)).toBe(2_500);
  });

  it('jitters: draws spread over [0, ceiling) and their mean grows with the attempt', () => {
    const mean = (attempt: number) => {
      const draws = Array.from({ length: 4_000 }, () => backoffDelay(attempt, 100, 60_000));
      for (const d of draws) expect(d).toBeGreaterThanOrEqual(0);
      for (const d of draws) expect(d).toBeLessThan(100 * 2 ** (attempt - 1));
      expect(new Set(draws).size).toBeGreaterThan(20);
      return draws.reduce((s, d) => s + d, 0) / draws.length;
    };
    const means = [1, 2, 3, 4, 5].map(mean);
    for (let i = 1; i < means.length; i++) expect(means[i]).toBeGreaterThan(means[i - 1] as number);
    expect(means[2]).toBeGreaterThan(170);
    expect(means[2]).toBeLessThan(230);
  });
});

if (SELECTED_STORES.has('postgres'))
  describe('migrate', () => {
    const schemas: Target[] = [];
    afterAll(async () => {
      for (const t of schemas) await t.dispose();
    });

    it('runs concurrently from several connections on PostgreSQL, and again later', async () => {
      const target = await postgresTarget();
      schemas.push(target);
      const dbs = await Promise.all([1, 2, 3, 4].map(() => openDb(target.url)));
      try {
        const queues = dbs.map((db) => new EventQueue(db, { consumerFor: () => undefined }));
        await Promise.all(queues.map((q) => q.migrate()));
        await queues[0]?.migrate();
        expect(await queues[1]?.intake('s', 'e', 't', null)).toBe('accepted');
      } finally {
        for (const db of dbs) await db.close();
      }
    });
  });

for (const { name, target } of selectStores([
  { name: 'sqlite', target: sqliteTarget },
  { name: 'postgres', target: postgresTarget },
] as const))
  describeQueue(name, target);
