/**
 * Issue 30 item 13: the intent's trace id crosses the asynchronous hops. A handler invoked with
 * Oncely-Trace-Id (or only a traceparent) that enqueues an outbox message: the outbox row keeps
 * the trace id, and the consumer of the message runs under it (its ctx and its record). A webhook
 * delivered with either header: the event row keeps it, and its consumer runs under it. A flow
 * started by a handler or a consumer keeps the starter's, and its run and steps carry it.
 */
import { afterAll, describe, expect, it } from 'vitest';
import { defineFlow } from '../../src/flows/define.js';
import type { ConsumerModule, HandlerModule } from '../../src/host/app.js';
import { hostTargets, type RunningHost, startHost } from '../support/host-app.js';
import { until } from '../support/wait.js';

const SCHEMA = 'CREATE TABLE IF NOT EXISTS traced (event_id TEXT PRIMARY KEY, trace_id TEXT NOT NULL)';

const pay: HandlerModule = {
  async handle(input, ctx) {
    const { orderId } = input as { orderId: string };
    await ctx.outbox.enqueue('order.paid', { orderId });
    return { orderId };
  },
};

/** Notes the trace id it ran under, by event id. */
const note: ConsumerModule = {
  async handle(event, ctx) {
    const noted = await ctx.store.createIfAbsent('traced', { eventId: event.id, traceId: ctx.traceId }, ['eventId']);
    if (!noted.ok) throw new Error(noted.error.message);
  },
};

const TRACEPARENT_ID = '4bf92f3577b34da6a3ce929d0e0e4736';
const TRACEPARENT = `00-${TRACEPARENT_ID}-00f067aa0ba902b7-01`;

/** The trace id the consumer of `eventId` ran under, once it ran; a timeout shows the events table. */
async function tracedBy(app: RunningHost, eventId: string): Promise<string> {
  const [row] = await until(
    `the consumer of ${eventId} to run`,
    () => app.rows<{ trace_id: string }>('SELECT trace_id FROM traced WHERE event_id = ?', [eventId]),
    (rows) => rows.length > 0,
  ).catch(async (error: Error) => {
    const events = await app.rows('SELECT source, event_id, status, last_error FROM oncely_events');
    throw new Error(`${error.message}; events: ${JSON.stringify(events)}`);
  });
  return (row as { trace_id: string }).trace_id;
}

/** The trace id of the engine's record of `key` (a consumer's key is its event id). */
async function recordTrace(app: RunningHost, action: string, key: string): Promise<string | undefined> {
  const rows = await app.rows<{ trace_id: string }>(
    'SELECT trace_id FROM oncely_records WHERE action = ? AND key = ?',
    [action, key],
  );
  return rows[0]?.trace_id;
}

/** Trace ids the flow function and a step of `ship` ran under, by order id (the worker runs in this process). */
const stepTraces = new Map<string, string[]>();

const ship = defineFlow('ship', { seed: ['orderId'] }, async (run, input: { orderId: string }) => {
  const traces = [run.traceId];
  traces.push(await run.step('label', (ctx) => ctx.traceId));
  stepTraces.set(input.orderId, traces);
});

/** The consumer of an order paid: starts its shipping flow in its own transaction. */
const startShipping: ConsumerModule = {
  async handle(event, ctx) {
    await ctx.flows.start(ship, { orderId: (event.data as { orderId: string }).orderId });
  },
};

const shipNow: HandlerModule = {
  async handle(input, ctx) {
    return ctx.flows.start(ship, input as { orderId: string });
  },
};

/** What `ship` for `orderId` ran under, once it ran; a timeout shows the orders that did run. */
async function shipped(orderId: string): Promise<string[]> {
  const seen = await until(
    `flow ship of ${orderId} to run`,
    () => ({ traces: stepTraces.get(orderId), ran: [...stepTraces.keys()] }),
    ({ traces }) => traces !== undefined,
  );
  return seen.traces as string[];
}

describe.each(hostTargets())(
  'review3.13: host on $name: the trace id crosses the outbox and webhook intake',
  ({ name, target, cleanup }) => {
    afterAll(cleanup);

    it('an outbox message keeps the trace id of the invocation that enqueued it, and its consumer runs under it', async () => {
      const app = await startHost(target(), {
        schemaSql: SCHEMA,
        handlers: { 'orders.pay': pay },
        consumers: { 'outbox/order.paid': note },
      });
      try {
        for (const [orderId, headers, expected] of [
          ['ORD-13', { 'oncely-trace-id': 'intent-13' }, 'intent-13'],
          ['ORD-14', { traceparent: TRACEPARENT }, TRACEPARENT_ID],
          // Oncely-Trace-Id names the intent; the traceparent only the caller's span.
          ['ORD-15', { 'oncely-trace-id': 'intent-15', traceparent: TRACEPARENT }, 'intent-15'],
        ] as const) {
          const paid = await app.invoke(
            'orders.pay',
            { orderId },
            { 'idempotency-key': `"pay-${orderId}"`, ...headers },
          );
          expect(paid.status, orderId).toBe(200);
          expect(paid.body.traceId, orderId).toBe(expected);
          const [message] = await app.rows<{ id: string; trace_id: string }>(
            'SELECT id, trace_id FROM oncely_outbox WHERE payload LIKE ?',
            [`%${orderId}%`],
          );
          expect(message?.trace_id, orderId).toBe(expected);
          const id = message?.id ?? '';
          expect(await tracedBy(app, id), orderId).toBe(expected);
          expect(await recordTrace(app, 'consume:outbox/order.paid', id), orderId).toBe(expected);
          const [event] = await app.rows<{ trace_id: string }>(
            'SELECT trace_id FROM oncely_events WHERE event_id = ?',
            [id],
          );
          expect(event?.trace_id, orderId).toBe(expected);
        }
      } finally {
        await app.stop();
      }
    });

    it('a flow started by a handler, or by the consumer of its outbox message, runs its steps under the trace id', async () => {
      const app = await startHost(target(), {
        handlers: { 'orders.pay': pay, 'orders.ship': shipNow },
        consumers: { 'outbox/order.paid': startShipping },
        flows: [ship],
      });
      try {
        const direct = await app.invoke(
          'orders.ship',
          { orderId: `${name}-20` },
          {
            'idempotency-key': `"ship-${name}-20"`,
            'oncely-trace-id': 'intent-20',
          },
        );
        expect(direct.status).toBe(200);
        expect(await shipped(`${name}-20`)).toEqual(['intent-20', 'intent-20']);
        // Two hops: the handler's outbox message, then its consumer's flow start.
        const paid = await app.invoke(
          'orders.pay',
          { orderId: `${name}-21` },
          { 'idempotency-key': `"pay-${name}-21"`, traceparent: TRACEPARENT },
        );
        expect(paid.status).toBe(200);
        expect(await shipped(`${name}-21`)).toEqual([TRACEPARENT_ID, TRACEPARENT_ID]);
        expect(await app.rows('SELECT workflow_id, trace_id FROM oncely_flows ORDER BY workflow_id')).toEqual([
          { workflow_id: `ship-${name}-20`, trace_id: 'intent-20' },
          { workflow_id: `ship-${name}-21`, trace_id: TRACEPARENT_ID },
        ]);
      } finally {
        await app.stop();
      }
    });

    it("a webhook keeps the sender's Oncely-Trace-Id or traceparent, and its consumer runs under it; none: a trace of its own", async () => {
      const app = await startHost(target(), {
        schemaSql: SCHEMA,
        config: {
          sources: { relay: { kind: 'id-header', idHeader: 'x-event-id', typeHeader: 'x-event-type', unsigned: true } },
        },
        consumers: { 'relay/order.paid': note },
      });
      try {
        const deliver = (id: string, headers: Record<string, string>) =>
          fetch(`${app.base}/v1/webhooks/relay`, {
            method: 'POST',
            headers: { 'content-type': 'application/json', 'x-event-id': id, 'x-event-type': 'order.paid', ...headers },
            body: JSON.stringify({ orderId: id }),
          });
        for (const [id, headers, expected] of [
          ['evt-13', { 'oncely-trace-id': 'sender-13' }, 'sender-13'],
          ['evt-14', { traceparent: TRACEPARENT }, TRACEPARENT_ID],
          // An unusable Oncely-Trace-Id never refuses the event: the traceparent names the trace.
          ['evt-15', { 'oncely-trace-id': ' ', traceparent: TRACEPARENT }, TRACEPARENT_ID],
        ] as const) {
          expect((await deliver(id, headers)).status, id).toBe(200);
          expect(await tracedBy(app, id), id).toBe(expected);
          expect(await recordTrace(app, 'consume:relay/order.paid', id), id).toBe(expected);
        }
        expect((await deliver('evt-16', {})).status).toBe(200);
        const own = await tracedBy(app, 'evt-16');
        expect(own).toMatch(/^[0-9a-f-]{36}$/);
        expect(await recordTrace(app, 'consume:relay/order.paid', 'evt-16')).toBe(own);
      } finally {
        await app.stop();
      }
    });
  },
);
