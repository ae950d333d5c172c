import { randomUUID } from 'node:crypto';
import { afterAll, describe, expect, it } from 'vitest';
import { serveBanner } from '../../src/cli/serve-banner.js';
import { hostBrokers } from '../../src/host/brokers.js';
import type { HostConfig } from '../../src/host/config.js';
import { routeIndex } from '../../src/host/routes.js';
import { hostTargets, startHost } from '../support/host-app.js';
import { until } from '../support/wait.js';
import { closeAdmin, freshStream, NATS } from './support/nats.js';

const SCHEMA = 'CREATE TABLE effects (run TEXT PRIMARY KEY, event_id TEXT NOT NULL, kind TEXT NOT NULL)';

afterAll(() => closeAdmin());

describe('the host config of brokers', () => {
  const deps = { db: undefined as never, events: undefined as never, consumers: { deliver: async () => {} } };
  const refused = async (config: HostConfig) => {
    await expect(hostBrokers(config, deps)).rejects.toMatchObject({ code: 'CONFIG_INVALID' });
  };

  it('refuses a broker source named like a webhook source or outbox, and routes to unknown targets', async () => {
    const nats = { kind: 'nats', stream: 'S', durable: 'd' } as const;
    await refused({ sources: { shop: { kind: 'hmac', secret: 's' } as never }, brokers: { shop: nats } });
    await refused({ brokers: { outbox: nats } });
    await refused({ outbox: { 'order.paid': ['nowhere'] } });
    await refused({ outbox: { 'order.paid': [] } });
    await refused({ targets: { consumers: { kind: 'nats' } } });
    await refused({ brokers: { orders: { kind: 'kafka' } as never } });
  });

  it('names each broker source and target in the serve banner, with where their states are served', () => {
    const config: HostConfig = {
      brokers: { orders: { kind: 'nats', stream: 'ORDERS', durable: 'shop' } },
      targets: { bus: { kind: 'nats' } },
    };
    const app = { dir: '.', config, schemaSql: '', handlers: new Map(), consumers: new Map(), flows: [] };
    const banner = serveBanner(routeIndex(app, 'http://localhost:3000'), '.').split('\n');
    expect(banner).toEqual(
      expect.arrayContaining([
        "brokers (each one's state and lag: GET http://localhost:3000/v1/brokers):",
        '  sources: orders (nats)',
        '  outbox targets: bus (nats)',
      ]),
    );
    const none = { ...app, config: {} };
    expect(serveBanner(routeIndex(none, 'http://localhost:3000'), '.')).not.toContain('brokers');
  });
});

for (const { name, target, cleanup } of hostTargets()) {
  describe(`a host with a NATS source and target on ${name}`, () => {
    afterAll(cleanup);

    it('consumes the stream through its consumers, routes an outbox topic to both its consumers and NATS, and reports each state', async () => {
      const stream = await freshStream(100);
      const source = `orders_${randomUUID().slice(0, 8)}`;
      const inbound = stream.subject('in.order.paid');
      const host = await startHost(target(), {
        schemaSql: SCHEMA,
        config: {
          brokers: {
            [source]: {
              kind: 'nats',
              servers: NATS,
              stream: stream.stream,
              durable: 'host',
              subject: stream.subject('in.>'),
            },
          },
          targets: { bus: { kind: 'nats', servers: NATS, subject: (topic) => stream.subject(`out.${topic}`) } },
          outbox: { 'order.shipped': ['consumers', 'bus'], 'order.audited': ['bus'] },
          events: { backoff: 5 },
        },
        consumers: {
          [`${source}/${inbound}`]: {
            handle: async (event, ctx) => {
              await ctx.store.createIfAbsent('effects', { run: randomUUID(), event_id: event.id, kind: 'paid' }, [
                'run',
              ]);
              await ctx.outbox.enqueue('order.shipped', { order: event.id }, { id: `shipped-${event.id}` });
              await ctx.outbox.enqueue('order.audited', { order: event.id }, { id: `audited-${event.id}` });
            },
          },
          'outbox/order.shipped': {
            handle: async (event, ctx) =>
              void (await ctx.store.createIfAbsent(
                'effects',
                { run: randomUUID(), event_id: event.id, kind: 'shipped' },
                ['run'],
              )),
          },
        },
      });
      try {
        await stream.publish('in.order.paid', { n: 1 }, 'p1');
        await stream.publish('in.order.paid', { n: 2 }, 'p2');
        // sleep: past the stream's duplicate window, so JetStream stores the repeat and only the host can drop it.
        await new Promise((resolve) => setTimeout(resolve, 200));
        // Past JetStream's window: stored again by the stream, a duplicate for the host.
        await stream.publish('in.order.paid', { n: 1 }, 'p1');
        const effects = () =>
          host.rows<{ event_id: string; kind: string }>('SELECT event_id, kind FROM effects ORDER BY kind, event_id');
        await until('every effect', async () => (await effects()).length === 4);
        await until('both topics published', async () => (await stream.messages()) === 3 + 4);
        await host.host.events.drain();
        expect(await effects()).toEqual([
          { event_id: 'p1', kind: 'paid' },
          { event_id: 'p2', kind: 'paid' },
          { event_id: 'shipped-p1', kind: 'shipped' },
          { event_id: 'shipped-p2', kind: 'shipped' },
        ]);
        const stats = await host.host.events.stats();
        expect([stats.accepted, stats.duplicate]).toEqual([4, 1]);
        const res = await fetch(`${host.base}/v1/brokers`);
        const body = (await res.json()) as {
          data: { sources: Record<string, unknown>; targets: Record<string, unknown> };
        };
        expect(body.data).toEqual({
          sources: { [source]: { state: 'connected', lag: 0 } },
          targets: { bus: { state: 'connected' } },
        });
      } finally {
        await host.stop();
        await stream.dispose();
      }
      expect(host.host.brokers()).toEqual({
        sources: { [source]: { state: 'stopped' } },
        targets: { bus: { state: 'stopped' } },
      });
    });
  });
}
