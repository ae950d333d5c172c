/**
 * Event types are sender input: 20,000 distinct types no consumer declares must not become 20,000
 * metric series, totals rows and entries of the stats answers. Declared types keep their own label;
 * the rest count under one. A type that is too long or not printable is refused at intake.
 */
import { afterAll, describe, expect, it } from 'vitest';
import { MAX_EVENT_TYPE_LENGTH } from '../../src/core/key.js';
import { openDb } from '../../src/db/index.js';
import { UNDECLARED_TYPE } from '../../src/host/events.js';
import { hostTargets, startHost } from '../support/host-app.js';
import { until } from '../support/wait.js';

const TYPES = 20_000;
const CHUNK = 500;

for (const { name, target, cleanup } of hostTargets())
  describe(`event type labels on ${name}`, () => {
    afterAll(cleanup);

    it('review3.5: 20,000 distinct undeclared types keep the metric series, totals and stats bounded; declared types keep their label', async () => {
      const url = target();
      const source = `labels_${Math.random().toString(36).slice(2, 8)}`;
      const host = await startHost(url, {
        schemaSql: 'CREATE TABLE IF NOT EXISTS effects (event_id TEXT PRIMARY KEY)',
        config: {
          sources: { [source]: { kind: 'id-field', idField: 'id', typeField: 'type', unsigned: true } },
          events: { backoff: 5 },
        },
        consumers: {
          [`${source}/order.paid`]: {
            handle: async (event, ctx) =>
              void (await ctx.store.createIfAbsent('effects', { event_id: event.id }, ['event_id'])),
          },
        },
      });
      const db = await openDb(url);
      try {
        // First, so the worker applies it before it works through the 20,000 others.
        const paid = await fetch(`${host.base}/v1/webhooks/${source}`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ id: 'p-1', type: 'order.paid' }),
        });
        expect(paid.status).toBe(200);
        // Delivered as the broker inbox delivers: batches stored in one transaction each.
        for (let from = 0; from < TYPES; from += CHUNK) {
          const batch = Array.from({ length: Math.min(CHUNK, TYPES - from) }, (_, i) => ({
            id: `u-${from + i}`,
            // As long as a type may be: the most each label would have held.
            type: `t${from + i}.`.padEnd(MAX_EVENT_TYPE_LENGTH, 'x'),
            data: {},
          }));
          await db.transaction((tx) => host.host.events.intakeMany(source, batch, tx));
        }
        // The consumer's row, and the count of it the worker makes once its transaction committed.
        const applied = await until(
          'the declared event applied by its consumer, and counted',
          async () => ({
            rows: (await host.rows('SELECT event_id FROM effects')).length,
            counted: host.host.metrics.value('oncely_events_total', [source, 'order.paid', 'applied']),
          }),
          ({ rows, counted }) => rows > 0 && counted > 0,
          { timeoutMs: 20_000, intervalMs: 50 },
        );
        expect(applied, 'the declared event applied by its consumer, once').toEqual({ rows: 1, counted: 1 });

        // The process's series: the declared type's own, and one label for all the rest.
        const series = host.host.metrics.read('oncely_events_total').map((s) => s.labels.join('|'));
        expect(series.sort()).toEqual([
          `${source}|${UNDECLARED_TYPE}|accepted`,
          `${source}|order.paid|accepted`,
          `${source}|order.paid|applied`,
        ]);
        expect(host.host.metrics.value('oncely_events_total', [source, UNDECLARED_TYPE, 'accepted'])).toBe(TYPES);

        const metrics = await (await fetch(`${host.base}/metrics`)).text();
        expect(metrics.split('\n').filter((l) => l.startsWith('oncely_events_total{'))).toHaveLength(3);
        expect(metrics.length).toBeLessThan(64 * 1024);

        const eventStats = await (await fetch(`${host.base}/v1/events/stats`)).text();
        expect(eventStats.length).toBeLessThan(1024);
        expect(JSON.parse(eventStats).data.accepted).toBe(TYPES + 1);

        const stats = (await (await fetch(`${host.base}/v1/stats`)).json()) as {
          data: { totals: Record<string, { labels: Record<string, string>; value: number }[]> };
        };
        expect(stats.data.totals.oncely_events_total?.map((s) => s.labels.type).sort()).toEqual([
          UNDECLARED_TYPE,
          'order.paid',
          'order.paid',
        ]);
        const rows = await host.rows<{ n: number | string }>(
          "SELECT COUNT(DISTINCT labels) AS n FROM oncely_totals WHERE metric = 'oncely_events_total'",
        );
        expect(Number(rows[0]?.n)).toBe(3);
      } finally {
        await db.close();
        await host.stop();
      }
    }, 120_000);

    it('review3.5: refuses a type over 128 characters or with a control character, at the webhook and at intake, and stores nothing', async () => {
      const url = target();
      const source = `refuse_${Math.random().toString(36).slice(2, 8)}`;
      const host = await startHost(url, {
        config: { sources: { [source]: { kind: 'id-field', idField: 'id', typeField: 'type', unsigned: true } } },
      });
      try {
        const post = async (body: unknown) => {
          const res = await fetch(`${host.base}/v1/webhooks/${source}`, {
            method: 'POST',
            headers: { 'content-type': 'application/json' },
            body: JSON.stringify(body),
          });
          return { status: res.status, code: ((await res.json()) as { error?: { code: string } }).error?.code };
        };
        const refused = { status: 400, code: 'EVENT_TYPE_INVALID' };
        expect(await post({ id: 'a', type: 'x'.repeat(MAX_EVENT_TYPE_LENGTH + 1) })).toEqual(refused);
        expect(await post({ id: 'b', type: 'order.\u0000paid' })).toEqual(refused);
        expect(await post({ id: 'c', type: 'order\npaid' })).toEqual(refused);
        expect(await post({ id: 'd', type: 'x'.repeat(MAX_EVENT_TYPE_LENGTH) })).toEqual({
          status: 200,
          code: undefined,
        });
        await expect(host.host.events.intake(source, 'e', 'order.\u0000paid', {})).rejects.toMatchObject({
          code: 'EVENT_TYPE_INVALID',
        });
        const stored = await host.rows<{ event_id: string }>('SELECT event_id FROM oncely_events WHERE source = ?', [
          source,
        ]);
        expect(stored.map((r) => r.event_id)).toEqual(['d']);
      } finally {
        await host.stop();
      }
    });
  });
