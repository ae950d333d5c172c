/**
 * Every error a host handler meets carries a catalogue code and the status that says whose fault
 * it is, over HTTP on a listening host, on SQLite and PostgreSQL: the caller's contract is a 4xx
 * (ctx.stableId or ctx.outbox.enqueue without a key, a flow's seed missing or reused with another
 * input, a value the column cannot hold), the server's own failures a 5xx. A consumer's contract
 * error is dead-lettered at its first attempt; any other failure is retried.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { isContractError, OncelyError } from '../../src/core/errors.js';
import { defineFlow } from '../../src/flows/define.js';
import type { HandlerModule } from '../../src/host/app.js';
import type { HostContext, HostEvent } from '../../src/host/index.js';
import { hostTargets, type RunningHost, startHost, type TestApp } from '../support/host-app.js';
import { until } from '../support/wait.js';

const SCHEMA = 'CREATE TABLE IF NOT EXISTS marks (id TEXT PRIMARY KEY, note TEXT NOT NULL)';

/** A Result's refusal thrown as the OncelyError it describes, as the README tells handlers to. */
const mark = async (ctx: HostContext, id: string, note: unknown) => {
  const written = await ctx.store.createIfAbsent('marks', { id, note }, ['id']);
  if (!written.ok) throw new OncelyError(written.error.code, written.error.message);
};

/** A key is optional for these handlers: what needs one decides. */
const optional = (handle: HandlerModule['handle']): HandlerModule => ({ idempotency: { required: false }, handle });

const ship = defineFlow('ship', { seed: ['orderId'] }, async (_run, input: { orderId: string; note: string }) => ({
  shipped: input.orderId,
}));

const APP: TestApp = {
  config: { events: { maxAttempts: 3, backoff: 10 } },
  schemaSql: SCHEMA,
  flows: [ship],
  handlers: {
    // Writes first, so a refusal shows its rollback.
    'orders.create': optional(async (input, ctx) => {
      const { mark: id } = input as { mark: string };
      await mark(ctx, id, 'before the id');
      return { orderId: ctx.stableId('order') };
    }),
    'orders.notify': optional(async (input, ctx) => {
      const { id, topic = 'order.noted' } = input as { id?: string; topic?: string };
      return ctx.outbox.enqueue(topic, { id }, id === undefined ? {} : { id });
    }),
    'orders.ship': optional(async (input, ctx) => ctx.flows.start(ship, input as { orderId: string; note: string })),
    'orders.mark': optional(async (input, ctx) => {
      const { table, note } = input as { table: string; note: unknown };
      const written = await ctx.store.createIfAbsent(table, { id: 'm', note }, ['id']);
      if (!written.ok) throw new OncelyError(written.error.code, written.error.message);
      return written.data.created;
    }),
    'orders.log': optional(async (_input, ctx) => {
      const cycle: Record<string, unknown> = {};
      cycle.self = cycle;
      ctx.log.info({ amount: 10n }, 'a bigint');
      ctx.log.warn({ cycle }, 'a cycle');
      return 'logged';
    }),
  },
  consumers: {
    // An event without an integer version breaks the consumer's ordering: the event is wrong.
    'jobs/versioned': {
      ordering: { aggregate: () => 'A', version: (e) => (e.data as { version: number }).version },
      handle: async (event: HostEvent, ctx: HostContext) => mark(ctx, event.id, 'versioned'),
    },
    // A value the column cannot hold, thrown as its Result's OncelyError: VALUE_INVALID, 400.
    'jobs/valued': { handle: async (event: HostEvent, ctx: HostContext) => mark(ctx, event.id, { not: 'text' }) },
    // Not a contract error: the server failed, and the next attempt may not.
    'jobs/flaky': {
      handle: async () => {
        throw new Error('the downstream is down');
      },
    },
  },
};

describe('a contract error', () => {
  it("is an OncelyError whose code's status is 400, 413 or 422; never a 409, a 5xx or a look-alike", () => {
    const contract = ['KEY_REQUIRED', 'VALUE_INVALID', 'REQUEST_TOO_LARGE', 'FLOW_INPUT_MISMATCH'] as const;
    const not = ['IN_PROGRESS', 'CONSTRAINT_VIOLATION', 'HANDLER_TIMEOUT', 'TABLE_UNKNOWN', 'BUDGET_EXCEEDED'] as const;
    expect(contract.map((code) => isContractError(new OncelyError(code, code)))).toEqual(contract.map(() => true));
    expect(not.map((code) => isContractError(new OncelyError(code, code)))).toEqual(not.map(() => false));
    // A library's error that happens to carry such a code is not oncely's verdict on the request.
    expect(isContractError(Object.assign(new Error('x'), { code: 'KEY_REQUIRED' }))).toBe(false);
  });
});

const targets = hostTargets();
afterAll(async () => {
  for (const t of targets) await t.cleanup();
});

for (const { name, target } of targets)
  describe(`contract errors on ${name}`, () => {
    let app: RunningHost;
    beforeAll(async () => {
      app = await startHost(target(), APP);
    });
    afterAll(async () => {
      await app?.stop();
    });

    const key = (k: string) => ({ 'idempotency-key': JSON.stringify(k) });
    const marks = async (id: string) => (await app.rows('SELECT id FROM marks WHERE id = ?', [id])).length;

    it('ctx.stableId without a key is 400 KEY_REQUIRED telling the caller to send the header; nothing is kept', async () => {
      const refused = await app.invoke('orders.create', { mark: 'keyless' });
      expect(refused).toMatchObject({ status: 400, body: { code: 400, error: { code: 'KEY_REQUIRED' } } });
      expect((refused.body.error as { message: string }).message).toMatch(/send the Idempotency-Key header/);
      expect(await marks('keyless')).toBe(0);
    });

    it('with a key it answers 200, and a retry with the same key answers the same id', async () => {
      const first = await app.invoke('orders.create', { mark: 'keyed' }, key('order-1'));
      const again = await app.invoke('orders.create', { mark: 'keyed' }, key('order-1'));
      const other = await app.invoke('orders.create', { mark: 'keyed-2' }, key('order-2'));
      expect([first.status, again.status, other.status]).toEqual([200, 200, 200]);
      const id = (first.body.data as { orderId: string }).orderId;
      expect(id).toMatch(/^[0-9a-f-]{36}$/);
      expect((again.body.data as { orderId: string }).orderId).toBe(id);
      expect(again.headers.get('idempotent-replayed')).toBe('true');
      expect((other.body.data as { orderId: string }).orderId).not.toBe(id);
      expect(await marks('keyed')).toBe(1);
    });

    it('ctx.outbox.enqueue without an id or a key is 400 KEY_REQUIRED; with an id it is written', async () => {
      const refused = await app.invoke('orders.notify', {});
      expect(refused).toMatchObject({ status: 400, body: { error: { code: 'KEY_REQUIRED' } } });
      expect((refused.body.error as { message: string }).message).toMatch(/ctx\.outbox\.enqueue.*Idempotency-Key/);
      const written = await app.invoke('orders.notify', { id: `note-${name}` });
      expect(written).toMatchObject({ status: 200, body: { data: { id: `note-${name}`, created: true } } });
      const badId = await app.invoke('orders.notify', { id: 'x'.repeat(300) });
      expect(badId).toMatchObject({ status: 400, body: { error: { code: 'KEY_INVALID' } } });
    });

    it('review3.4: ctx.outbox.enqueue refuses a topic no consumer could take (a NUL, over 128 characters): 400, nothing written', async () => {
      for (const topic of ['order\u0000noted', 't'.repeat(129)]) {
        const refused = await app.invoke('orders.notify', { id: `bad-topic-${topic.length}`, topic });
        expect(refused).toMatchObject({ status: 400, body: { error: { code: 'EVENT_TYPE_INVALID' } } });
      }
      expect(await app.rows("SELECT id FROM oncely_outbox WHERE id LIKE 'bad-topic-%'")).toEqual([]);
    });

    it("ctx.flows.start: a missing seed is 400 KEY_REQUIRED, another input under the seed's id 422 FLOW_INPUT_MISMATCH", async () => {
      expect(await app.invoke('orders.ship', { note: 'no order id' })).toMatchObject({
        status: 400,
        body: { error: { code: 'KEY_REQUIRED' } },
      });
      expect(await app.invoke('orders.ship', { orderId: 'O-1', note: 'first' })).toMatchObject({
        status: 200,
        body: { data: { already: false } },
      });
      expect(await app.invoke('orders.ship', { orderId: 'O-1', note: 'first' })).toMatchObject({
        status: 200,
        body: { data: { already: true } },
      });
      expect(await app.invoke('orders.ship', { orderId: 'O-1', note: 'other' })).toMatchObject({
        status: 422,
        body: { error: { code: 'FLOW_INPUT_MISMATCH' } },
      });
    });

    it("a store refusal thrown as its OncelyError answers its code's status: the caller's value 400, the app's table 500", async () => {
      expect(await app.invoke('orders.mark', { table: 'marks', note: { an: 'object' } })).toMatchObject({
        status: 400,
        body: { error: { code: 'VALUE_INVALID' } },
      });
      expect(await app.invoke('orders.mark', { table: 'nope', note: 'x' })).toMatchObject({
        status: 500,
        body: { error: { code: 'TABLE_UNKNOWN' } },
      });
      expect(await app.invoke('orders.mark', { table: 'marks', note: 'x' })).toMatchObject({
        status: 200,
        body: { data: true },
      });
    });

    it('ctx.log never fails the execution: a bigint or a cycle in its fields is logged, the handler answers 200', async () => {
      expect(await app.invoke('orders.log', {})).toMatchObject({ status: 200, body: { data: 'logged' } });
    });

    it("a consumer's contract error is dead-lettered at its first attempt; a server failure is retried first", async () => {
      const { events } = app.host;
      await events.intake('jobs', `v-${name}`, 'versioned', { version: 'one' });
      await events.intake('jobs', `val-${name}`, 'valued', {});
      await events.intake('jobs', `f-${name}`, 'flaky', {});
      const dead = async () => (await events.deadLetters()).filter((d) => d.eventId.endsWith(`-${name}`));
      const letters = Object.fromEntries(
        (await until('the three events dead-lettered', dead, (d) => d.length >= 3)).map((d) => [d.type, d]),
      );
      expect(letters.versioned).toMatchObject({ attempts: 1, lastError: expect.stringContaining('INVALID_ARGUMENT') });
      expect(letters.valued).toMatchObject({ attempts: 1, lastError: expect.stringContaining('VALUE_INVALID') });
      expect(letters.flaky).toMatchObject({
        attempts: 3,
        lastError: expect.stringContaining('the downstream is down'),
      });
    });
  });
