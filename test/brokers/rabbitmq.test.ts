import { fileURLToPath } from 'node:url';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { eventInbox, type Inbox } from '../../src/brokers/inbox.js';
import { type RabbitSourceOptions, rabbitmqSource, rabbitmqTarget } from '../../src/brokers/rabbitmq.js';
import type { Db } from '../../src/db/types.js';
import type { EventQueue } from '../../src/host/events.js';
import { enqueue, OutboxRelay } from '../../src/host/outbox.js';
import { startWorker, type Worker } from '../support/spawn.js';
import { until } from '../support/wait.js';
import {
  closeRabbitConnections,
  DIALECTS,
  keptLogger,
  openQueue,
  RABBITMQ_URL,
  rabbitAdmin,
  type TestDb,
  unique,
} from './support/brokers.js';

const CHILD = fileURLToPath(new URL('./support/crash-child.ts', import.meta.url));

for (const [dialect, makeDb] of Object.entries(DIALECTS)) {
  describe(`RabbitMQ source and target on ${dialect}`, () => {
    let testDb: TestDb;
    let db: Db;
    let events: EventQueue;
    let admin: Awaited<ReturnType<typeof rabbitAdmin>>;
    let queue: string;
    const inboxes: Inbox[] = [];
    const workers: Worker[] = [];

    beforeEach(async () => {
      testDb = await makeDb();
      ({ db, events } = await openQueue(testDb.url));
      admin = await rabbitAdmin();
      queue = unique('q');
      await admin.queue(queue);
    });

    afterEach(async () => {
      for (const w of workers.splice(0)) w.child.kill('SIGKILL');
      for (const inbox of inboxes.splice(0)) await inbox.stop();
      await admin.close();
      await db.close();
      await testDb.dispose();
    });

    const sourceOptions = (extra: Partial<RabbitSourceOptions> = {}): RabbitSourceOptions => ({
      name: 'orders',
      url: RABBITMQ_URL,
      queue,
      capacity: 8,
      backoff: 20,
      maxBackoff: 200,
      ...extra,
    });

    const startInbox = async (options: RabbitSourceOptions, logger = keptLogger().logger) => {
      const inbox = eventInbox(rabbitmqSource(options), { db, events, logger });
      inboxes.push(inbox);
      await inbox.start();
      return inbox;
    };

    const stored = () =>
      db.all<{ event_id: string; type: string; payload: string }>(
        'SELECT event_id, type, payload FROM oncely_events ORDER BY event_id',
      );

    // Stops the inbox (its connection closes, so the broker requeues anything not acked) and counts what is left.
    const leftAfterStop = async (inbox: Inbox) => {
      await inbox.stop();
      return admin.count(queue);
    };

    it('stores the same message id once, published twice and again after it was stored, another body a conflict; every copy acked', async () => {
      await admin.publish(queue, { orderId: 'A' }, { messageId: 'evt-1', type: 'order.paid' });
      await admin.publish(queue, { orderId: 'A' }, { messageId: 'evt-1', type: 'order.paid' });
      await admin.publish(queue, { orderId: 'B' }, { messageId: 'evt-2' });
      const inbox = await startInbox(sourceOptions());
      await until('three messages taken', async () => {
        const s = await events.stats();
        return s.accepted + s.duplicate === 3;
      });
      await admin.publish(queue, { orderId: 'A' }, { messageId: 'evt-1', type: 'order.paid' });
      await until('the late copy taken', async () => (await events.stats()).duplicate === 2);
      // The same id with another body, twice in one batch: conflicts, the first body kept.
      await admin.publish(queue, { orderId: 'other' }, { messageId: 'evt-2' });
      await admin.publish(queue, { orderId: 'other' }, { messageId: 'evt-2' });
      await until('the conflicts taken', async () => (await events.stats()).conflict === 2);
      const stats = await events.stats();
      expect([stats.accepted, stats.duplicate, stats.conflict]).toEqual([2, 2, 2]);
      // The type comes from the `type` property, else the routing key (the queue's name on the default exchange).
      expect(await stored()).toEqual([
        { event_id: 'evt-1', type: 'order.paid', payload: '{"orderId":"A"}' },
        { event_id: 'evt-2', type: queue, payload: '{"orderId":"B"}' },
      ]);
      expect(inbox.status()).toMatchObject({ state: 'connected' });
      expect(await leftAfterStop(inbox)).toBe(0);
    });

    it('reads the id from a header or a body field, the type from a header or the routing key', async () => {
      await admin.publish(queue, { n: 1 }, { headers: { 'x-event-id': 'h-1', 'x-event-type': 'from.header' } });
      const byHeader = await startInbox(
        sourceOptions({ id: { header: 'x-event-id' }, type: { header: 'x-event-type' } }),
      );
      await until('the header message', async () => (await events.stats()).accepted === 1);
      await byHeader.stop();
      await admin.publish(queue, { eventId: 'f-1', n: 2 }, { messageId: 'ignored', type: 'ignored' });
      const byField = await startInbox(sourceOptions({ name: 'other', id: { field: 'eventId' }, type: 'routing-key' }));
      await until('the body-field message', async () => (await events.stats()).accepted === 2);
      expect(await stored()).toEqual([
        { event_id: 'f-1', type: queue, payload: '{"eventId":"f-1","n":2}' },
        { event_id: 'h-1', type: 'from.header', payload: '{"n":1}' },
      ]);
      expect(await leftAfterStop(byField)).toBe(0);
    });

    it('rejects a message without an id, and a body that is not JSON, to the dead-letter queue with one line each', async () => {
      const { logger, lines } = keptLogger();
      await admin.publish(queue, { orderId: 'no-id' }, { type: 'order.paid' });
      await admin.publish(queue, Buffer.from('not json'), { messageId: 'evt-bad' });
      await admin.publish(queue, { orderId: 'C' }, { messageId: 'evt-ok' });
      const inbox = await startInbox(sourceOptions({ logger }), logger);
      await until('two dead letters', async () => (await admin.count(`${queue}.dead`)) === 2);
      await until('the good message', async () => (await events.stats()).accepted === 1);
      expect((await stored()).map((e) => e.event_id)).toEqual(['evt-ok']);
      const warnings = lines.filter((l) => l.level === 'warn');
      expect(warnings.map((l) => [l.message, l.fields.reason]).sort()).toEqual([
        ['broker message rejected', 'the body is not JSON'],
        ['broker message rejected', 'the message has no id: it is rejected, never processed without a key'],
      ]);
      const dead = [await admin.get(`${queue}.dead`), await admin.get(`${queue}.dead`)];
      expect(dead.map((m) => (m ? m.content.toString() : null)).sort()).toEqual(['not json', '{"orderId":"no-id"}']);
      expect(await leftAfterStop(inbox)).toBe(0);
    });

    it('acks a batch as one prefix without acking a message given back or rejected among them', async () => {
      for (const id of ['m-1', 'm-2', 'm-3', 'm-4', 'm-5']) await admin.publish(queue, { id }, { messageId: id });
      const seen: string[] = [];
      const source = rabbitmqSource(sourceOptions());
      await source.start(async (batch) => {
        for (const message of batch) {
          seen.push(message.id as string);
          // m-2 is given back the first time, m-4 rejected; the rest acked around them.
          if (message.id === 'm-2' && seen.filter((id) => id === 'm-2').length === 1) await message.retry();
          else if (message.id === 'm-4') await message.reject('refused by the test');
          else await message.ack();
        }
      });
      await until('m-2 again', () => seen.filter((id) => id === 'm-2').length === 2);
      await source.stop();
      expect(seen.filter((id) => id !== 'm-2').sort()).toEqual(['m-1', 'm-3', 'm-4', 'm-5']);
      expect(await admin.count(queue)).toBe(0);
      expect(await admin.count(`${queue}.dead`)).toBe(1);
      const dead = await admin.get(`${queue}.dead`);
      if (!dead) throw new Error('no dead letter');
      expect(dead.properties.messageId).toBe('m-4');
    });

    it('reconnects after the server closed its connection, logging each change of state once, and takes what came meanwhile', async () => {
      const { logger, lines } = keptLogger();
      const name = unique('src');
      await admin.publish(queue, { n: 1 }, { messageId: 'before' });
      const inbox = await startInbox(sourceOptions({ name, logger }));
      await until('the first message', async () => (await events.stats()).accepted === 1);
      expect(await closeRabbitConnections(`oncely ${name}`)).toBe(1);
      await admin.publish(queue, { n: 2 }, { messageId: 'after' });
      await until('the message after the loss', async () => (await events.stats()).accepted === 2);
      await until('connected again', () => inbox.status().state === 'connected');
      const states = lines.filter((l) => l.fields.broker === `rabbitmq source ${name}`);
      expect(states.map((l) => [l.level, l.fields.from, l.fields.state])).toEqual([
        ['info', 'stopped', 'connecting'],
        ['info', 'connecting', 'connected'],
        ['warn', 'connected', 'reconnecting'],
        ['info', 'reconnecting', 'connected'],
      ]);
      expect(String(states[2]?.fields.error)).toContain('closed by the oncely test');
      expect(await leftAfterStop(inbox)).toBe(0);
      expect(lines.at(-1)?.fields.state).toBe('stopped');
    });

    it('kill -9 between commit and ack: the message comes again and is answered as a duplicate', async () => {
      await admin.publish(queue, { orderId: 'K' }, { messageId: 'evt-k', type: 'order.paid' });
      const child = startWorker({ mode: 'inbox', db: testDb.url, rabbitmq: sourceOptions() }, CHILD);
      workers.push(child);
      await child.waitFor('committed evt-k');
      child.child.kill('SIGKILL');
      await child.exited;
      expect(await events.stats()).toMatchObject({ accepted: 1, duplicate: 0 });
      const inbox = await startInbox(sourceOptions());
      await until('the redelivery', async () => (await events.stats()).duplicate === 1);
      expect(await events.stats()).toMatchObject({ accepted: 1, duplicate: 1 });
      expect(await stored()).toHaveLength(1);
      expect(await leftAfterStop(inbox)).toBe(0);
    });

    it('outbox target: persistent, message-id = outbox id, marked delivered after the confirm; an unroutable row is not', async () => {
      const target = rabbitmqTarget({ url: RABBITMQ_URL });
      const nowhere = unique('no-queue');
      await db.transaction(async (tx) => {
        await enqueue(tx, 'out-1', queue, { orderId: 'O1' });
        await enqueue(tx, 'out-2', nowhere, { orderId: 'O2' });
      });
      expect(() => new OutboxRelay(db, { target, inFlight: 0 })).toThrow(
        expect.objectContaining({ code: 'INVALID_ARGUMENT' }),
      );
      // Both published side by side, then settled in one transaction: one confirmed, one returned unroutable.
      const relay = new OutboxRelay(db, { target, backoff: '1m', inFlight: 32 });
      expect(await relay.deliverDue()).toBe(2);
      await target.close();
      const rows = await db.all<{ id: string; status: string; last_error: string | null }>(
        'SELECT id, status, last_error FROM oncely_outbox ORDER BY id',
      );
      expect(rows.map((r) => [r.id, r.status])).toEqual([
        ['out-1', 'delivered'],
        ['out-2', 'pending'],
      ]);
      expect(rows[1]?.last_error).toContain('routed outbox message out-2 to no queue');
      const message = await admin.get(queue);
      if (!message) throw new Error('out-1 is not in the queue');
      expect(message.content.toString()).toBe('{"orderId":"O1"}');
      expect(message.properties).toMatchObject({ messageId: 'out-1', type: queue, deliveryMode: 2 });
      expect(await admin.count(queue)).toBe(0);
    });

    it('kill -9 between publish and mark: published again with the same id, and the source dedupes it', async () => {
      await db.transaction((tx) => enqueue(tx, 'out-k', queue, { orderId: 'K' }));
      const child = startWorker(
        { mode: 'relay', db: testDb.url, rabbitmq: { url: RABBITMQ_URL }, leaseMs: 300 },
        CHILD,
      );
      workers.push(child);
      await child.waitFor('published out-k');
      child.child.kill('SIGKILL');
      await child.exited;
      const target = rabbitmqTarget({ url: RABBITMQ_URL });
      const relay = new OutboxRelay(db, { target, lease: 300 });
      await until('the row claimed again after its lease', async () => (await relay.deliverDue()) === 1);
      await target.close();
      const [row] = await db.all<{ status: string }>("SELECT status FROM oncely_outbox WHERE id = 'out-k'");
      expect(row?.status).toBe('delivered');
      expect(await admin.count(queue)).toBe(2);
      const inbox = await startInbox(sourceOptions());
      await until('both copies taken', async () => (await events.stats()).duplicate === 1);
      expect(await events.stats()).toMatchObject({ accepted: 1, duplicate: 1 });
      expect((await stored()).map((e) => e.event_id)).toEqual(['out-k']);
      expect(await leftAfterStop(inbox)).toBe(0);
    });
  });
}
