import { fileURLToPath } from 'node:url';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { eventInbox, type Inbox } from '../../src/brokers/inbox.js';
import {
  type RedisStreamsSourceOptions,
  redisStreamsSource,
  redisStreamsTarget,
} from '../../src/brokers/redis-streams.js';
import type { Db } from '../../src/db/types.js';
import type { EventQueue } from '../../src/host/events.js';
import { enqueue, OutboxRelay } from '../../src/host/outbox.js';
import { startWorker, type Worker } from '../support/spawn.js';
import { until } from '../support/wait.js';
import { DIALECTS, keptLogger, openQueue, REDIS_URL, redisAdmin, type TestDb, unique } from './support/brokers.js';

const CHILD = fileURLToPath(new URL('./support/crash-child.ts', import.meta.url));

for (const [dialect, makeDb] of Object.entries(DIALECTS)) {
  describe(`Redis Streams source and target on ${dialect}`, () => {
    let testDb: TestDb;
    let db: Db;
    let events: EventQueue;
    let admin: ReturnType<typeof redisAdmin>;
    let stream: string;
    const group = 'shop';
    const inboxes: Inbox[] = [];
    const workers: Worker[] = [];

    beforeEach(async () => {
      testDb = await makeDb();
      ({ db, events } = await openQueue(testDb.url));
      admin = redisAdmin();
      stream = unique('stream');
      admin.own(stream, `${stream}:dead`);
    });

    afterEach(async () => {
      for (const w of workers.splice(0)) w.child.kill('SIGKILL');
      for (const inbox of inboxes.splice(0)) await inbox.stop();
      await admin.close();
      await db.close();
      await testDb.dispose();
    });

    const sourceOptions = (extra: Partial<RedisStreamsSourceOptions> = {}): RedisStreamsSourceOptions => ({
      name: 'orders',
      url: REDIS_URL,
      stream,
      group,
      consumer: 'parent',
      capacity: 8,
      block: 100,
      backoff: 20,
      maxBackoff: 200,
      ...extra,
    });

    const startInbox = async (options: RedisStreamsSourceOptions, logger = keptLogger().logger) => {
      const inbox = eventInbox(redisStreamsSource(options), { db, events, logger });
      inboxes.push(inbox);
      await inbox.start();
      return inbox;
    };

    const add = (fields: Record<string, string>) =>
      admin.redis.xadd(stream, '*', ...Object.entries(fields).flat()) as Promise<string>;
    const pending = async () => Number(((await admin.redis.xpending(stream, group)) as unknown[])[0]);
    const stored = () =>
      db.all<{ event_id: string; type: string; payload: string }>(
        'SELECT event_id, type, payload FROM oncely_events ORDER BY event_id',
      );

    it('stores the same id once, added twice and again after it was stored; every entry acked', async () => {
      await add({ id: 'evt-1', type: 'order.paid', data: '{"orderId":"A"}' });
      await add({ id: 'evt-1', type: 'order.paid', data: '{"orderId":"A"}' });
      await add({ id: 'evt-2', data: '{"orderId":"B"}' });
      const inbox = await startInbox(sourceOptions());
      await until('three entries taken', async () => {
        const s = await events.stats();
        return s.accepted + s.duplicate === 3;
      });
      await add({ id: 'evt-1', type: 'order.paid', data: '{"orderId":"A"}' });
      await until('the late copy taken', async () => (await events.stats()).duplicate === 2);
      expect(await events.stats()).toMatchObject({ accepted: 2, duplicate: 2, conflict: 0 });
      // No type field: the stream's name is the type.
      expect(await stored()).toEqual([
        { event_id: 'evt-1', type: 'order.paid', payload: '{"orderId":"A"}' },
        { event_id: 'evt-2', type: stream, payload: '{"orderId":"B"}' },
      ]);
      await until('every entry acked', async () => (await pending()) === 0);
      await until('lag 0 reported', () => inbox.status().lag === 0);
      expect(inbox.status()).toEqual({ state: 'connected', lag: 0 });
    });

    it('rejects an entry without an id, and a body that is not JSON, to the dead-letter stream with one line each', async () => {
      const { logger, lines } = keptLogger();
      await add({ type: 'order.paid', data: '{"orderId":"no-id"}' });
      await add({ id: 'evt-bad', data: 'not json' });
      await add({ id: 'evt-ok', data: '{"orderId":"C"}' });
      await startInbox(sourceOptions({ logger }), logger);
      await until('the good entry', async () => (await events.stats()).accepted === 1);
      await until('two dead letters, all acked', async () => (await admin.redis.xlen(`${stream}:dead`)) === 2);
      await until('all acked', async () => (await pending()) === 0);
      expect((await stored()).map((e) => e.event_id)).toEqual(['evt-ok']);
      const dead = (await admin.redis.xrange(`${stream}:dead`, '-', '+')).map(([, fields]) => {
        const map = new Map<string, string>();
        for (let i = 0; i < fields.length; i += 2) map.set(fields[i] as string, fields[i + 1] as string);
        return map.get('reason');
      });
      expect(dead.sort()).toEqual([
        'the body is not JSON',
        'the message has no id: it is rejected, never processed without a key',
      ]);
      expect(
        lines
          .filter((l) => l.level === 'warn')
          .map((l) => [l.message, l.fields.reason])
          .sort(),
      ).toEqual([
        ['broker message rejected', 'the body is not JSON'],
        ['broker message rejected', 'the message has no id: it is rejected, never processed without a key'],
      ]);
    });

    it("claims a dead consumer's pending entries with XAUTOCLAIM once idle, and reads its own at once after a restart", async () => {
      await admin.redis.xgroup('CREATE', stream, group, '0', 'MKSTREAM');
      for (let i = 0; i < 5; i++) await add({ id: `evt-${i}`, data: String(i) });
      // Two consumers read entries and die before acking: 'ghost' (never back) and 'parent' (this source's name).
      await admin.redis.xreadgroup('GROUP', group, 'ghost', 'COUNT', 3, 'STREAMS', stream, '>');
      await admin.redis.xreadgroup('GROUP', group, 'parent', 'COUNT', 2, 'STREAMS', stream, '>');
      expect(await pending()).toBe(5);
      await startInbox(sourceOptions({ claimIdle: '1m' }));
      await until('its own two entries, before any idle time', async () => (await events.stats()).accepted === 2);
      expect(await pending()).toBe(3);
      await inboxes.pop()?.stop();
      // sleep: the ghost's entries must be idle past the next source's claimIdle of 250 ms.
      await new Promise((resolve) => setTimeout(resolve, 300));
      await startInbox(sourceOptions({ claimIdle: 250 }));
      await until("the ghost's three, claimed", async () => (await events.stats()).accepted === 5);
      await until('all acked', async () => (await pending()) === 0);
      expect((await stored()).map((e) => e.event_id)).toEqual(['evt-0', 'evt-1', 'evt-2', 'evt-3', 'evt-4']);
      expect(await events.stats()).toMatchObject({ accepted: 5, duplicate: 0 });
    });

    it('reconnects after the server dropped its connections, logging each change of state once', async () => {
      const { logger, lines } = keptLogger();
      const name = unique('src');
      await add({ id: 'before', data: '1' });
      const inbox = await startInbox(sourceOptions({ name, logger }));
      await until('the first entry', async () => (await events.stats()).accepted === 1);
      // Only this source's two connections (named after it): other tests share this Redis.
      const list = String(await admin.redis.call('CLIENT', 'LIST'));
      const ours = list
        .split('\n')
        .filter((line) => line.includes(` name=oncely-${name} `) || line.includes(` name=oncely-${name}-reader `))
        .map((line) => /^id=(\d+)/.exec(line)?.[1] as string);
      expect(ours).toHaveLength(2);
      for (const id of ours) await admin.redis.call('CLIENT', 'KILL', 'ID', id);
      await add({ id: 'after', data: '2' });
      await until('the entry after the loss', async () => (await events.stats()).accepted === 2);
      await until('connected again', () => inbox.status().state === 'connected');
      const states = lines.filter((l) => l.fields.broker === `redis streams source ${name}`);
      expect(states.map((l) => [l.level, l.fields.from, l.fields.state])).toEqual([
        ['info', 'stopped', 'connecting'],
        ['info', 'connecting', 'connected'],
        ['warn', 'connected', 'reconnecting'],
        ['info', 'reconnecting', 'connected'],
      ]);
      await until('all acked', async () => (await pending()) === 0);
    });

    it('kill -9 between commit and ack: the entry is claimed back and answered as a duplicate', async () => {
      await add({ id: 'evt-k', type: 'order.paid', data: '{"orderId":"K"}' });
      const child = startWorker({ mode: 'inbox', db: testDb.url, redis: sourceOptions({ consumer: 'child' }) }, CHILD);
      workers.push(child);
      await child.waitFor('committed evt-k');
      child.child.kill('SIGKILL');
      await child.exited;
      expect(await events.stats()).toMatchObject({ accepted: 1, duplicate: 0 });
      expect(await pending()).toBe(1);
      await startInbox(sourceOptions({ claimIdle: 250 }));
      await until('the claimed entry', async () => (await events.stats()).duplicate === 1);
      expect(await events.stats()).toMatchObject({ accepted: 1, duplicate: 1 });
      await until('acked', async () => (await pending()) === 0);
    });

    it('outbox target: XADD with the outbox id, topic and payload as fields; a relay killed after XADD adds it again, deduped', async () => {
      await db.transaction(async (tx) => {
        await enqueue(tx, 'out-1', 'order.paid', { orderId: 'O1' });
        await enqueue(tx, 'out-k', 'order.paid', { orderId: 'K' });
      });
      const child = startWorker(
        { mode: 'relay', db: testDb.url, redis: { url: REDIS_URL, stream }, leaseMs: 300 },
        CHILD,
      );
      workers.push(child);
      // The child relay delivers in created order: out-1 first, then it hangs after out-1's XADD.
      await child.waitFor('published out-1');
      child.child.kill('SIGKILL');
      await child.exited;
      const target = redisStreamsTarget({ url: REDIS_URL, stream });
      const relay = new OutboxRelay(db, { target, lease: 300 });
      await until('both rows delivered', async () => {
        await relay.deliverDue();
        const rows = await db.all<{ status: string }>("SELECT status FROM oncely_outbox WHERE status = 'delivered'");
        return rows.length === 2;
      });
      await target.close();
      const entries = (await admin.redis.xrange(stream, '-', '+')).map(([, fields]) => fields);
      const one = ['id', 'out-1', 'type', 'order.paid', 'data', '{"orderId":"O1"}'];
      const k = ['id', 'out-k', 'type', 'order.paid', 'data', '{"orderId":"K"}'];
      // The killed relay's XADD first; then both rows again, in whichever order their leases ran out.
      expect(entries[0]).toEqual(one);
      expect(entries.slice(1).sort((a, b) => a.join().localeCompare(b.join()))).toEqual([one, k]);
      await startInbox(sourceOptions());
      await until('three entries taken', async () => {
        const s = await events.stats();
        return s.accepted + s.duplicate === 3;
      });
      expect(await events.stats()).toMatchObject({ accepted: 2, duplicate: 1 });
    });
  });
}
