import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { HostContext } from '../../src/host/index.js';
import { hostTargets, type RunningHost, startHost } from '../support/host-app.js';

const SCHEMA = `CREATE TABLE IF NOT EXISTS orders (
  id TEXT PRIMARY KEY,
  tenant TEXT NOT NULL,
  item TEXT NOT NULL
)`;

/** Writes an order under a stable id and enqueues a message with the default (key-derived) outbox id. */
const create = {
  async handle(input: { item: string }, ctx: HostContext) {
    const id = ctx.stableId('order');
    const written = await ctx.store.createIfAbsent('orders', { id, tenant: ctx.tenant, item: input.item }, ['id']);
    if (!written.ok) throw new Error(written.error.message);
    const message = await ctx.outbox.enqueue('order.created', { id });
    return { id, tenant: ctx.tenant, messageId: message.id };
  },
};

const targets = hostTargets();
afterAll(async () => {
  for (const t of targets) await t.cleanup();
});

for (const { name, target } of targets)
  describe(`host tenancy on ${name}`, () => {
    let app: RunningHost;
    beforeAll(async () => {
      app = await startHost(target(), {
        // A demo tenant from a header; a real app resolves it from a verified credential. Decoded,
        // as a token's claims would be: HTTP itself never carries control characters in a header.
        config: {
          tenant: (headers) =>
            headers['x-account'] === undefined ? undefined : decodeURIComponent(headers['x-account']),
        },
        schemaSql: SCHEMA,
        handlers: { 'orders.create': create },
      });
    });
    afterAll(() => app.stop());

    const as = (tenant: string, key: string, item: string) =>
      app.invoke('orders.create', { item }, { 'x-account': encodeURIComponent(tenant), 'idempotency-key': key });

    it("defect 11.1: tenant B cannot replay tenant A's key", async () => {
      const a = await as('acme', 'order-1', 'book');
      expect(a).toMatchObject({ status: 200, body: { code: 0, data: { tenant: 'acme' } } });
      // Same key, same body, other tenant: B's own execution, never A's stored order.
      const b = await as('globex', 'order-1', 'book');
      expect(b.status).toBe(200);
      expect(b.headers.get('idempotent-replayed')).toBeNull();
      expect(b.body.data).toMatchObject({ tenant: 'globex' });
      const aData = a.body.data as { id: string; messageId: string };
      const bData = b.body.data as { id: string; messageId: string };
      // Stable ids and default outbox ids are per tenant too: B's order and message are not A's.
      expect(bData.id).not.toBe(aData.id);
      expect(bData.messageId).not.toBe(aData.messageId);
      const orders = await app.rows<{ tenant: string }>('SELECT tenant FROM orders ORDER BY tenant');
      expect(orders.map((o) => o.tenant)).toEqual(['acme', 'globex']);
      const messages = await app.rows('SELECT id FROM oncely_outbox');
      expect(messages).toHaveLength(2);
      const records = await app.rows<{ tenant: string }>(
        "SELECT tenant FROM oncely_records WHERE key = 'order-1' ORDER BY tenant",
      );
      expect(records.map((r) => r.tenant)).toEqual(['acme', 'globex']);
      // A's replay is still A's.
      const again = await as('acme', 'order-1', 'book');
      expect(again.headers.get('idempotent-replayed')).toBe('true');
      expect(again.body).toEqual({ ...a.body, requestId: expect.any(String) });
    });

    it("defect 11.1: tenant B cannot block tenant A's predictable keys", async () => {
      expect((await as('globex', 'order-2', 'squatted')).status).toBe(200);
      // Without tenant scoping this was 422 KEY_REUSED: B's record held A's key.
      const a = await as('acme', 'order-2', 'lamp');
      expect(a).toMatchObject({ status: 200, body: { data: { tenant: 'acme' } } });
    });

    it('defect 11.1: an empty, 10,000-character or unprintable tenant is 400 TENANT_INVALID and runs nothing', async () => {
      const before = (await app.rows('SELECT id FROM orders')).length;
      for (const tenant of ['', ' ', 'x'.repeat(10_000), 'a\x07b', 'a\u200bb']) {
        const answer = await as(tenant, 'order-3', 'pen');
        expect(answer, JSON.stringify(tenant.slice(0, 8))).toMatchObject({
          status: 400,
          body: { code: 400, error: { code: 'TENANT_INVALID' } },
        });
      }
      expect(await app.rows('SELECT id FROM orders')).toHaveLength(before);
      expect(await app.rows("SELECT key FROM oncely_records WHERE key = 'order-3'")).toHaveLength(0);
    });

    it('defect 11.1: a request without a tenant is the default tenant, apart from named ones', async () => {
      const anonymous = await app.invoke('orders.create', { item: 'book' }, { 'idempotency-key': 'order-1' });
      expect(anonymous).toMatchObject({ status: 200, body: { data: { tenant: 'default' } } });
      expect(anonymous.headers.get('idempotent-replayed')).toBeNull();
    });
  });
