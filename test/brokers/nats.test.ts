import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, afterEach, beforeEach, describe, expect, it } from 'vitest';
import { type EventIntake, eventInbox, type Inbox } from '../../src/brokers/inbox.js';
import { natsSource, natsTarget } from '../../src/brokers/nats.js';
import { brokerRelay } from '../../src/brokers/outbox.js';
import type { OncelyLogger } from '../../src/core/observer.js';
import { openDb } from '../../src/db/index.js';
import type { Db } from '../../src/db/types.js';
import { type ConsumerBinding, EventQueue } from '../../src/host/events.js';
import { enqueue } from '../../src/host/outbox.js';
import { dropSchema, freshSchema, POSTGRES_URL } from '../support/postgres.js';
import { startWorker } from '../support/spawn.js';
import { until } from '../support/wait.js';
import { closeAdmin, freshStream, natsProxy, type TestStream } from './support/nats.js';

const CHILD = fileURLToPath(new URL('./support/nats-child.ts', import.meta.url));
const EFFECTS = 'CREATE TABLE IF NOT EXISTS effects (event_id TEXT NOT NULL, note TEXT)';

function recording() {
  const lines: { level: string; message: string; fields: Record<string, unknown> }[] = [];
  const at = (level: string) => (fields: Record<string, unknown>, message: string) =>
    void lines.push({ level, message, fields });
  const logger: OncelyLogger = { info: at('info'), warn: at('warn'), error: at('error') };
  return { logger, lines };
}

const targets: { name: string; url: () => string; cleanup: () => Promise<void> }[] = (() => {
  const schema = freshSchema();
  return [
    { name: 'sqlite', url: () => join(mkdtempSync(join(tmpdir(), 'oncely-nats-')), 'app.db'), cleanup: async () => {} },
    { name: 'postgres', url: () => `${POSTGRES_URL}?schema=${schema}`, cleanup: () => dropSchema(schema) },
  ];
})();

afterAll(() => closeAdmin());

for (const target of targets) {
  describe(`NATS JetStream inbox on ${target.name}`, () => {
    let url: string;
    let db: Db;
    let stream: TestStream;
    let events: EventQueue;
    const inboxes: Inbox[] = [];
    let consumers: Record<string, ConsumerBinding> = {};
    let durable = 0;

    afterAll(() => target.cleanup());

    const open = async (windowMs?: number) => {
      stream = await freshStream(windowMs);
      url = target.url();
      db = await openDb(url);
      await db.run(EFFECTS);
      await db.run('DELETE FROM effects');
      events = new EventQueue(db, {
        consumerFor: (_source, type) => consumers[type],
        baseDelayMs: 5,
        maxDelayMs: 20,
        maxAttempts: 3,
        pollMs: 20,
        logger: recording().logger,
      });
      await events.migrate();
      events.start();
    };
    const inbox = async (
      options: Partial<Parameters<typeof natsSource>[0]> = {},
      intake: EventIntake = events,
      logger?: OncelyLogger,
    ) => {
      const source = natsSource({
        name: `nats_${target.name}`,
        stream: stream.stream,
        durable: `d${++durable}`,
        ...options,
      });
      const started = eventInbox(source, { db, events: intake, logger });
      inboxes.push(started);
      await started.start();
      return started;
    };
    const effects = () =>
      db.all<{ event_id: string; note: string | null }>('SELECT * FROM effects ORDER BY event_id, note');
    const write = (note?: string): ConsumerBinding => ({
      handle: async (event, tx) => void (await tx.run('INSERT INTO effects VALUES (?, ?)', [event.id, note ?? null])),
    });

    beforeEach(() => {
      consumers = {};
    });
    afterEach(async () => {
      for (const started of inboxes.splice(0)) await started.stop();
      await events.stop();
      // Another source's rows would be seen by the next test's queue on the same PostgreSQL schema.
      await db.run('DELETE FROM oncely_events');
      await db.close();
      await stream.dispose();
    });

    it('dedupes beyond the broker window: the same Nats-Msg-Id after JetStream forgot it is a counted duplicate, the effect runs once', async () => {
      await open(100);
      consumers = { [stream.subject('order.paid')]: write() };
      const before = await events.stats();
      for (const id of ['e1', 'e2', 'e3'])
        expect((await stream.publish('order.paid', { id }, id)).duplicate).toBe(false);
      // sleep: past the stream's 100 ms duplicate window, which is what this test is about.
      await new Promise((resolve) => setTimeout(resolve, 300));
      // Past the 100 ms window: JetStream stores both again.
      for (const id of ['e1', 'e2']) expect((await stream.publish('order.paid', { id }, id)).duplicate).toBe(false);
      expect(await stream.messages()).toBe(5);
      const started = await inbox();
      const name = started.source.name;
      await until('5 messages acked', async () => (await stream.consumer(`d${durable}`)).pending === 0);
      await until('acks', async () => (await stream.consumer(`d${durable}`)).ackPending === 0);
      await events.drain();
      const after = await events.stats();
      expect(after.accepted - before.accepted).toBe(3);
      expect(after.duplicate - before.duplicate).toBe(2);
      expect(after.applied - before.applied).toBe(3);
      expect((await effects()).map((e) => e.event_id)).toEqual(['e1', 'e2', 'e3']);
      expect((await events.get(name, 'e1'))?.status).toBe('applied');
      expect(started.status()).toEqual({ state: 'connected', lag: 0 });
    });

    it('with JetStream dedupe on, a repeat inside its window is dropped by the broker, one after it by oncely', async () => {
      await open(400);
      consumers = { [stream.subject('t')]: write() };
      const before = await events.stats();
      expect((await stream.publish('t', { n: 1 }, 'w1')).duplicate).toBe(false);
      expect((await stream.publish('t', { n: 1 }, 'w1')).duplicate).toBe(true);
      // sleep: past the stream's 400 ms duplicate window, so the third publish is stored.
      await new Promise((resolve) => setTimeout(resolve, 600));
      expect((await stream.publish('t', { n: 1 }, 'w1')).duplicate).toBe(false);
      expect(await stream.messages()).toBe(2);
      await inbox();
      await until('acked', async () => {
        const c = await stream.consumer(`d${durable}`);
        return c.pending === 0 && c.ackPending === 0;
      });
      await events.drain();
      const after = await events.stats();
      expect(after.accepted - before.accepted).toBe(1);
      expect(after.duplicate - before.duplicate).toBe(1);
      expect(await effects()).toHaveLength(1);
    });

    it('orders by business version, retries a failing consumer and dead-letters one that keeps failing', async () => {
      await open();
      let flaky = 0;
      const ordering = {
        aggregate: (e: { data: unknown }) => String((e.data as { order: string }).order),
        version: (e: { data: unknown }) => Number((e.data as { v: number }).v),
      };
      consumers = {
        [stream.subject('order.updated')]: { ...write('update'), ordering },
        [stream.subject('flaky')]: {
          handle: async (event, tx) => {
            if (++flaky < 3) throw new Error(`flaky attempt ${flaky}`);
            await tx.run('INSERT INTO effects VALUES (?, ?)', [event.id, 'flaky']);
          },
        },
        [stream.subject('broken')]: {
          handle: async () => {
            throw new Error('always');
          },
        },
      };
      const before = await events.stats();
      await stream.publish('order.updated', { order: 'A', v: 2 }, 'u2');
      await inbox({ capacity: 1 });
      await until('u2 applied', async () => (await events.get(`nats_${target.name}`, 'u2'))?.status === 'applied');
      await stream.publish('order.updated', { order: 'A', v: 1 }, 'u1');
      await stream.publish('flaky', {}, 'f1');
      await stream.publish('broken', {}, 'b1');
      await until('acked', async () => {
        const c = await stream.consumer(`d${durable}`);
        return c.pending === 0 && c.ackPending === 0;
      });
      await events.drain();
      const after = await events.stats();
      const delta = (k: keyof typeof after) => after[k] - before[k];
      expect([delta('accepted'), delta('applied'), delta('stale'), delta('retrying'), delta('dead_lettered')]).toEqual([
        4, 2, 1, 4, 1,
      ]);
      expect((await effects()).map((e) => `${e.event_id}:${e.note}`)).toEqual(['f1:flaky', 'u2:update']);
      expect((await events.deadLetters()).map((d) => d.id)).toEqual([`nats_${target.name}/b1`]);
    });

    it('rejects a message without an id with one log line (terminated, never stored); a body that is not JSON too', async () => {
      await open();
      consumers = { [stream.subject('t')]: write() };
      const { logger, lines } = recording();
      const before = await events.stats();
      await stream.publish('t', { no: 'id' });
      await stream.publishRaw('t', 'not json', 'raw1');
      await stream.publish('t', { ok: true }, 'ok1');
      await inbox({ logger }, events, logger);
      await until('all settled', async () => {
        const c = await stream.consumer(`d${durable}`);
        return c.pending === 0 && c.ackPending === 0;
      });
      await events.drain();
      expect((await events.stats()).accepted - before.accepted).toBe(1);
      expect((await effects()).map((e) => e.event_id)).toEqual(['ok1']);
      const warnings = lines.filter((l) => l.level === 'warn');
      // One line each, from the inbox, with the reason.
      expect(warnings.map((l) => [l.message, l.fields.reason]).sort()).toEqual([
        ['broker message rejected', 'the body is not JSON'],
        ['broker message rejected', 'the message has no id: it is rejected, never processed without a key'],
      ]);
      expect(warnings.map((l) => l.fields.type)).toEqual([stream.subject('t'), stream.subject('t')]);
    });

    it('reads the id from a body field and the type from a header', async () => {
      await open();
      consumers = { 'order.paid': write() };
      await stream.publish('anything', { eventId: 'b-1' }, undefined, { 'Event-Type': 'order.paid' });
      await stream.publish('anything', { eventId: 'b-1' }, undefined, { 'Event-Type': 'order.paid' });
      await inbox({ id: { field: 'eventId' }, type: { header: 'Event-Type' } });
      await until('acked', async () => {
        const c = await stream.consumer(`d${durable}`);
        return c.pending === 0 && c.ackPending === 0;
      });
      await events.drain();
      expect((await effects()).map((e) => e.event_id)).toEqual(['b-1']);
    });

    it('holds no more than its capacity unacked, and gives a batch whose transaction failed back for redelivery', async () => {
      await open();
      consumers = { [stream.subject('t')]: write() };
      const before = await events.stats();
      for (let i = 0; i < 20; i++) await stream.publish('t', { i }, `c${i}`);
      let release: () => void = () => {};
      const gate = new Promise<void>((resolve) => {
        release = resolve;
      });
      let failures = 0;
      let calls = 0;
      const intake: EventIntake = {
        intake: async (...args) => {
          calls++;
          await gate;
          // The first transaction fails: its messages come back (nak) and are stored on redelivery.
          if (failures++ === 0) throw new Error('database down');
          return events.intake(...args);
        },
      };
      await inbox({ capacity: 4, retryDelay: 50 }, intake);
      await until('a batch in flight', () => calls > 0);
      const held = await stream.consumer(`d${durable}`);
      expect(held.ackPending).toBeLessThanOrEqual(4);
      expect(held.ackPending + held.pending).toBe(20);
      release();
      await until('all acked', async () => {
        const c = await stream.consumer(`d${durable}`);
        return c.pending === 0 && c.ackPending === 0;
      });
      await events.drain();
      expect((await effects()).length).toBe(20);
      // The failed batch was taken again: every message stored once, none counted twice.
      const after = await events.stats();
      expect([after.accepted - before.accepted, after.duplicate - before.duplicate]).toEqual([20, 0]);
      expect(calls).toBeGreaterThan(20);
    });

    it('reconnects after the connection was dropped, logs each change of state once, and loses nothing', async () => {
      await open();
      consumers = { [stream.subject('t')]: write() };
      const proxy = await natsProxy();
      const { logger, lines } = recording();
      try {
        const started = await inbox({ servers: proxy.servers, logger });
        await until('connected', () => started.status().state === 'connected');
        await stream.publish('t', {}, 'r1');
        await until('r1 stored', async () => (await events.get(started.source.name, 'r1')) !== null);
        const states = () =>
          lines.filter((l) => l.fields.broker === `nats source ${started.source.name}`).map((l) => l.fields.state);
        proxy.drop();
        // The first reconnect comes within ~100 ms (full jitter): the log, not a poll, sees the loss.
        await until('reconnecting', () => states().includes('reconnecting'));
        await stream.publish('t', {}, 'r2');
        await until('connected again', () => started.status().state === 'connected');
        await until('r2 stored', async () => (await events.get(started.source.name, 'r2')) !== null, undefined, {
          timeoutMs: 30_000,
        });
        await events.drain();
        expect((await effects()).map((e) => e.event_id)).toEqual(['r1', 'r2']);
        expect(states()).toEqual(['connecting', 'connected', 'reconnecting', 'connected']);
      } finally {
        await proxy.close();
      }
    });

    it('acks only after the commit: a process killed between commit and ack gets its message again, answered as a duplicate', async () => {
      await open();
      consumers = { [stream.subject('t')]: write() };
      await stream.publish('t', { n: 1 }, 'k1');
      const name = `nats_${target.name}`;
      const child = startWorker(
        { job: 'inbox', db: url, stream: stream.stream, durable: 'killed', source: name },
        CHILD,
      );
      await child.waitFor('committed');
      expect((await child.exited).signal).toBe('SIGKILL');
      expect((await events.get(name, 'k1'))?.eventId).toBe('k1');
      const before = await events.stats();
      await inbox({ durable: 'killed' });
      await until('redelivered and acked', async () => {
        const c = await stream.consumer('killed');
        return c.pending === 0 && c.ackPending === 0;
      });
      await events.drain();
      const after = await events.stats();
      expect(after.duplicate - before.duplicate).toBe(1);
      expect(after.accepted - before.accepted).toBe(0);
      expect((await effects()).map((e) => e.event_id)).toEqual(['k1']);
    });
  });

  describe(`NATS JetStream outbox on ${target.name}`, () => {
    afterAll(() => target.cleanup());

    it('marks a row delivered only after the PubAck; a relay killed between PubAck and mark publishes again with the same id', async () => {
      const url = target.url();
      const db = await openDb(url);
      // Dedupe on (the default window): the second publish is dropped by JetStream.
      const deduped = await freshStream();
      // A tiny window: the second publish is stored, and an oncely inbox downstream dedupes it.
      const tiny = await freshStream(100);
      const target2 = natsTarget({ timeout: 500 });
      const relay = await brokerRelay(db, target2, { lease: 200, backoff: '1m', maxBackoff: '1m' });
      const status = async (id: string) =>
        (await db.all<{ status: string }>('SELECT status FROM oncely_outbox WHERE id = ?', [id]))[0]?.status;
      try {
        for (const stream of [deduped, tiny]) {
          const id = `o-${stream.stream}`;
          await db.transaction((tx) => enqueue(tx, id, stream.subject('shipped'), { order: id }));
          const child = startWorker({ job: 'relay', db: url }, CHILD);
          await child.waitFor('published');
          expect((await child.exited).signal).toBe('SIGKILL');
          expect(await stream.messages()).toBe(1);
          expect(await status(id)).not.toBe('delivered');
          // sleep: the dead relay's lease runs out (and the tiny window with it); this one publishes the row again with the same id.
          await new Promise((resolve) => setTimeout(resolve, 250));
          await until(
            `${id} delivered`,
            async () => (await relay.deliverDue()) > 0 && (await status(id)) === 'delivered',
          );
        }
        expect(await deduped.messages()).toBe(1);
        expect(await tiny.messages()).toBe(2);
        // A subject no stream captures: no PubAck, so the row is not marked delivered.
        const lost = `o-lost-${deduped.stream}`;
        await db.transaction((tx) => enqueue(tx, lost, `nowhere_${deduped.stream}.x`, {}));
        expect(await relay.deliverDue()).toBe(1);
        expect(await status(lost)).not.toBe('delivered');
        // Downstream: an oncely inbox on the tiny-window stream stores the row once.
        const events = new EventQueue(db, { consumerFor: () => undefined });
        await events.migrate();
        const before = await events.stats();
        const downstream = eventInbox(natsSource({ name: 'upstream', stream: tiny.stream, durable: 'down' }), {
          db,
          events,
        });
        await downstream.start();
        await until('downstream settled', async () => {
          const c = await tiny.consumer('down');
          return c.pending === 0 && c.ackPending === 0;
        });
        await downstream.stop();
        const after = await events.stats();
        expect([after.accepted - before.accepted, after.duplicate - before.duplicate]).toEqual([1, 1]);
      } finally {
        await target2.close();
        await deduped.dispose();
        await tiny.dispose();
        await db.close();
      }
    });
  });
}
