/**
 * The four rates count what the seeds count (review3.12): a webhook delivered three times, a broker
 * message redelivered, the outbox's own redelivery and a flow start that found its run are
 * intercepted duplicates under their own surfaces; a stale applyVersion is a stale drop. Checked
 * in the process's metrics, the database totals behind GET /v1/stats and the rates it answers.
 */
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { intakeBatch } from '../../src/brokers/inbox.js';
import type { BrokerMessage } from '../../src/brokers/types.js';
import { openDb } from '../../src/db/index.js';
import { defineFlow } from '../../src/flows/define.js';
import type { HostStats } from '../../src/host/stats.js';
import { hostTargets, type RunningHost, startHost } from '../support/host-app.js';
import { until } from '../support/wait.js';

const SCHEMA = 'CREATE TABLE prices (sku TEXT PRIMARY KEY, cents INTEGER NOT NULL, version INTEGER);';

const statsOf = async (base: string): Promise<HostStats> =>
  ((await (await fetch(`${base}/v1/stats`)).json()) as { data: HostStats }).data;

/** The non-zero series of one metric in /v1/stats, labels joined with '|'. */
function seriesOf(stats: HostStats, metric: string): Record<string, number> {
  const out: Record<string, number> = {};
  for (const { labels, value } of stats.totals[metric] ?? [])
    if (value !== 0) out[Object.values(labels).join('|')] = value;
  return out;
}

function message(id: string, type: string, data: unknown): BrokerMessage {
  return {
    id,
    type,
    data,
    ack: async () => undefined,
    retry: async () => undefined,
    reject: async () => undefined,
    working: async () => undefined,
  } as BrokerMessage;
}

for (const { name, target: makeTarget, cleanup } of hostTargets())
  describe(`the four rates on ${name}`, () => {
    afterAll(cleanup);
    const running: RunningHost[] = [];
    afterEach(async () => {
      for (const h of running.splice(0)) await h.stop();
    });

    it('review3.12: intake duplicates, flow starts that found their run and stale versioned writes are counted', async () => {
      const target = makeTarget();
      const order = defineFlow('order', { seed: ['id'] }, async (run, input: { id: string }) =>
        run.step('confirm', () => `ok-${input.id}`),
      );
      const h = await startHost(target, {
        config: { sources: { shop: { kind: 'id-field', idField: 'id', typeField: 'type', unsigned: true } } },
        schemaSql: SCHEMA,
        flows: [order],
        handlers: {
          'orders.place': { handle: (input, ctx) => ctx.flows.start(order, input as { id: string }) },
          'prices.set': {
            handle: async (input, ctx) => {
              const { sku, cents, version } = input as { sku: string; cents: number; version: number };
              const r = await ctx.store.applyVersion('prices', { sku }, version, { cents });
              return r.ok ? r.data : { refused: r.error.code };
            },
          },
        },
        consumers: { 'shop/order.paid': { handle: () => undefined } },
      });
      running.push(h);

      // The seeds' first example: one "order paid" webhook delivered three times.
      const paid = { id: 'evt-1', type: 'order.paid', order: 'ORD-1' };
      const outcomes: string[] = [];
      for (let i = 0; i < 3; i++) {
        const r = await fetch(`${h.base}/v1/webhooks/shop`, { method: 'POST', body: JSON.stringify(paid) });
        outcomes.push(((await r.json()) as { data: { outcome: string } }).data.outcome);
      }
      expect(outcomes).toEqual(['accepted', 'duplicate', 'duplicate']);

      // A broker batch holding a redelivery of a message it stored before.
      const db = await openDb(target);
      try {
        const first = await intakeBatch('orders', [message('m-1', 'order.paid', { n: 1 })], {
          db,
          events: h.host.events,
        });
        const again = await intakeBatch(
          'orders',
          [message('m-1', 'order.paid', { n: 1 }), message('m-2', 'order.paid', { n: 2 })],
          { db, events: h.host.events },
        );
        expect([first.accepted, again.accepted, again.duplicate]).toEqual([1, 1, 1]);
      } finally {
        await db.close();
      }

      // A flow started twice under one seed (two keys: two handler runs, one flow).
      const placed = await h.invoke('orders.place', { id: 'o1' }, { 'idempotency-key': 'place-1' });
      const placedAgain = await h.invoke('orders.place', { id: 'o1' }, { 'idempotency-key': 'place-2' });
      expect([placed.body.data, placedAgain.body.data]).toEqual([
        { workflowId: 'order-o1', already: false },
        { workflowId: 'order-o1', already: true },
      ]);

      // Versions 2 then 1: the older one arrives late and is dropped as stale.
      const set = (key: string, version: number) =>
        h.invoke('prices.set', { sku: 'A', cents: version * 100, version }, { 'idempotency-key': key });
      expect((await set('price-2', 2)).body.data).toEqual({ applied: true });
      expect((await set('price-1', 1)).body.data).toEqual({ applied: false, reason: 'stale' });

      const { metrics } = h.host;
      expect(metrics.value('oncely_duplicates_total', ['webhook', 'shop/order.paid', 'true'])).toBe(2);
      expect(metrics.value('oncely_duplicates_total', ['broker', 'orders/(other)', 'true'])).toBe(1);
      expect(metrics.value('oncely_duplicates_total', ['flow_start', 'order', 'true'])).toBe(1);
      expect(metrics.value('oncely_versions_total', ['prices', 'stale'])).toBe(1);

      // The database totals: the flow's count is flushed from the process each second.
      const stats = await until(
        'the flow start duplicate in the totals of /v1/stats',
        () => statsOf(h.base),
        (s) => seriesOf(s, 'oncely_duplicates_total')['flow_start|order|true'] === 1,
      );
      expect(seriesOf(stats, 'oncely_duplicates_total')).toEqual({
        'webhook|shop/order.paid|true': 2,
        'broker|orders/(other)|true': 1,
        'flow_start|order|true': 1,
      });
      expect(seriesOf(stats, 'oncely_versions_total')).toEqual({ 'prices|applied': 1, 'prices|stale': 1 });
      expect(stats.rateTotals).toMatchObject({
        duplicatesIntercepted: 4,
        duplicates: 4,
        staleEvents: 1,
        orderedEvents: 2,
      });
      expect(stats.rates.duplicateInterception).toEqual({ value: 1, target: 0.999 });
      expect(stats.rates.staleDrop).toEqual({ value: 0.5, target: null });
    });
  });
