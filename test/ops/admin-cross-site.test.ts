/**
 * review3.1: a page of another site cannot change anything through the admin API (SQLite and
 * PostgreSQL, with and without the admin token): a form it posts (text/plain, form-encoded), a
 * request whose Origin is another host or whose Sec-Fetch-Site is cross-site or same-site, and a
 * change without a JSON body are refused, and the failed flow stays failed, the waiting flow waits,
 * the approval stays pending, the dead letter stays dead. The same changes sent as this host's own
 * page sends them (same Origin, JSON `{}`) are made.
 */
import { randomBytes } from 'node:crypto';
import { request } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { getApproval, requestApproval } from '../../src/agent/approvals.js';
import { migrateAgentTables } from '../../src/agent/tables.js';
import { recordRef } from '../../src/core/record.js';
import { openDb } from '../../src/db/index.js';
import type { Db } from '../../src/db/types.js';
import { defineFlow } from '../../src/flows/define.js';
import { hostTargets, type RunningHost, startHost } from '../support/host-app.js';
import { until } from '../support/wait.js';

const TOKEN = randomBytes(24).toString('hex');
// biome-ignore lint/suspicious/noExplicitAny: answers are JSON read field by field.
type Json = any;

/** What a browser sends with a request a page of another site makes (no token: a page has none to send). */
const ATTACKS: { name: string; headers: Record<string, string>; body?: string; status: number; code: string }[] = [
  {
    name: 'a form posted as text/plain from another site',
    headers: { 'content-type': 'text/plain', origin: 'http://evil.example', 'sec-fetch-site': 'cross-site' },
    body: '{"all":true}',
    status: 403,
    code: 'ADMIN_CROSS_SITE',
  },
  {
    name: 'JSON from another Origin',
    headers: { 'content-type': 'application/json', origin: 'http://evil.example' },
    body: '{}',
    status: 403,
    code: 'ADMIN_CROSS_SITE',
  },
  {
    name: 'JSON from this machine on another port',
    headers: { 'content-type': 'application/json', origin: 'http://127.0.0.1:1' },
    body: '{}',
    status: 403,
    code: 'ADMIN_CROSS_SITE',
  },
  {
    name: 'Origin null (a sandboxed frame)',
    headers: { 'content-type': 'application/json', origin: 'null' },
    body: '{}',
    status: 403,
    code: 'ADMIN_CROSS_SITE',
  },
  {
    name: 'Sec-Fetch-Site cross-site',
    headers: { 'content-type': 'application/json', 'sec-fetch-site': 'cross-site' },
    body: '{}',
    status: 403,
    code: 'ADMIN_CROSS_SITE',
  },
  {
    name: 'Sec-Fetch-Site same-site',
    headers: { 'content-type': 'application/json', 'sec-fetch-site': 'same-site' },
    body: '{}',
    status: 403,
    code: 'ADMIN_CROSS_SITE',
  },
  {
    name: 'a form-encoded body',
    headers: { 'content-type': 'application/x-www-form-urlencoded' },
    body: 'all=true',
    status: 415,
    code: 'ADMIN_JSON_REQUIRED',
  },
  {
    name: 'text/plain from no page',
    headers: { 'content-type': 'text/plain' },
    body: '{}',
    status: 415,
    code: 'ADMIN_JSON_REQUIRED',
  },
  { name: 'no body', headers: {}, status: 415, code: 'ADMIN_JSON_REQUIRED' },
  {
    name: 'an empty JSON body',
    headers: { 'content-type': 'application/json' },
    body: '',
    status: 400,
    code: 'BODY_INVALID',
  },
];

// Each host on a database of its own: a fresh SQLite file, a fresh PostgreSQL schema.
const HOSTS = (['with the admin token', 'without a token (loopback only)'] as const).flatMap((mode) =>
  hostTargets().map((target) => ({ ...target, mode })),
);

describe.each(HOSTS)(
  'review3.1: admin changes from another site on $name, $mode',
  ({ target: makeTarget, cleanup, mode }) => {
    const state = { payDown: true };
    const pay = defineFlow<{ id: string }, string>('pay', { seed: ['id'] }, async (run) =>
      run.step(
        'charge',
        () => {
          if (state.payDown) throw new Error('psp down');
          return 'paid';
        },
        { retry: { attempts: 1, final: () => true } },
      ),
    );
    const wait = defineFlow<{ id: string }, unknown>('await', { seed: ['id'] }, async (run) => run.waitFor('go'));
    const app = {
      config: { events: { maxAttempts: 1, backoff: 10 } },
      consumers: {
        'shop/order.paid': {
          handle: () => {
            if (state.payDown) throw new Error('consumer down');
          },
        },
      },
      flows: [pay, wait],
    };

    const target = makeTarget();
    const token = mode === 'with the admin token' ? TOKEN : undefined;
    let running: RunningHost;
    let db: Db;
    let failed: string;
    let waiting: string;
    const saved = process.env.ONCELY_ADMIN_TOKEN;

    beforeAll(async () => {
      state.payDown = true;
      delete process.env.ONCELY_ADMIN_TOKEN;
      running = await startHost(target, app, token ? { host: { adminToken: token } } : {});
      db = await openDb(target);
      const flows = running.host.flows;
      if (!flows) throw new Error('the host has flows');
      failed = (await flows.start(pay, { id: 'F1' })).workflowId;
      waiting = (await flows.start(wait, { id: 'W1' })).workflowId;
      await until(
        'the pay flow to fail',
        () => flows.get(failed),
        (f) => f?.status === 'failed',
      );
      await until(
        'the await flow to wait',
        () => flows.get(waiting),
        (f) => f?.status === 'waiting',
      );
      await running.host.events.intake('shop', 'evt-1', 'order.paid', { orderId: 'O-1' });
      await until(
        'evt-1 to be dead-lettered',
        () => running.host.events.get('shop', 'evt-1'),
        (e) => e?.status === 'dead',
      );
      await migrateAgentTables(db);
      await requestApproval(db, {
        id: 'ap-1',
        tenant: 'default',
        tool: 'send_email',
        idempotencyKey: 'mail-1',
        contentHash: 'h',
        input: { to: 'x@example.com' },
        preview: { subject: 'hi' },
        requestedAt: Date.now(),
        expiresAt: Date.now() + 600_000,
      });
    });
    afterAll(async () => {
      if (saved !== undefined) process.env.ONCELY_ADMIN_TOKEN = saved;
      await db?.close();
      await running?.stop();
      await cleanup();
    });

    /** Every change route, with the body it takes. */
    const changes = () => [
      { path: `flows/${failed}/retry`, body: '{}' },
      { path: `flows/${waiting}/cancel`, body: '{}' },
      { path: 'approvals/ap-1/approve', body: '{}' },
      { path: 'approvals/ap-1/reject', body: '{"reason":"no"}' },
      { path: 'events/dead/replay', body: '{"all":true}' },
      {
        path: `records/${encodeURIComponent(recordRef({ tenant: 'default', action: 'charge', key: 'K-1' }))}/resolve`,
        body: '{"retry":true}',
      },
    ];
    const post = async (path: string, headers: Record<string, string>, body: string | undefined) => {
      const auth: Record<string, string> = token ? { authorization: `Bearer ${token}` } : {};
      const res = await fetch(`${running.base}/v1/admin/${path}`, {
        method: 'POST',
        headers: { ...auth, ...headers },
        body,
      });
      return { status: res.status, json: (await res.json()) as Json };
    };
    /** What the changes would change, as the database holds it. */
    const held = async () => ({
      failed: (await running.host.flows?.get(failed))?.status,
      waiting: (await running.host.flows?.get(waiting))?.status,
      approval: await getApproval(db, 'ap-1').then((a) => [a?.status, a?.decidedBy]),
      event: (await running.host.events.get('shop', 'evt-1'))?.status,
      audited: (await db.all('SELECT id FROM oncely_admin_actions')).length,
    });

    it('refuses each before anything changes, and the 403s before the body is read', async () => {
      const before = await held();
      expect(before).toEqual({
        failed: 'failed',
        waiting: 'waiting',
        approval: ['pending', null],
        event: 'dead',
        audited: 0,
      });
      const wrong: string[] = [];
      for (const attack of ATTACKS)
        for (const change of changes()) {
          // A request carries the route's own body where the attack sends JSON.
          const body = attack.body === '{}' ? change.body : attack.body;
          const res = await post(change.path, attack.headers, body);
          if (res.status !== attack.status || res.json.error?.code !== attack.code)
            wrong.push(`${attack.name} to ${change.path}: ${res.status} ${JSON.stringify(res.json)}`);
        }
      expect(wrong).toEqual([]);
      // A cross-site request declaring a body it never sends is answered at once: nothing waited for it.
      const port = Number(new URL(running.base).port);
      const unread = await new Promise<{ status: number; body: Json }>((resolve, reject) => {
        const req = request(
          {
            host: '127.0.0.1',
            port,
            path: `/v1/admin/flows/${failed}/retry`,
            method: 'POST',
            headers: {
              ...(token ? { authorization: `Bearer ${token}` } : {}),
              origin: 'http://evil.example',
              'content-type': 'application/json',
              'content-length': '100',
            },
          },
          (res) => {
            let text = '';
            res.on('data', (d) => {
              text += d;
            });
            res.on('end', () => {
              req.destroy();
              resolve({ status: res.statusCode ?? 0, body: JSON.parse(text) });
            });
          },
        );
        req.on('error', reject);
        req.flushHeaders();
      });
      expect(unread).toMatchObject({ status: 403, body: { error: { code: 'ADMIN_CROSS_SITE' } } });
      // Nothing changed; the refusals for who sent them wrote no audit row, the bad bodies one each.
      const after = await held();
      const refusedBodies = ATTACKS.filter((a) => a.status !== 403).length * changes().length;
      expect(after).toEqual({ ...before, audited: refusedBodies });
      const denied = changes().length * ATTACKS.filter((a) => a.status === 403).length + 1;
      const counted = ['flows.retry', 'flows.cancel', 'approvals.approve', 'approvals.reject']
        .concat(['events.replay', 'records.resolve'])
        .reduce((n, action) => n + running.host.metrics.value('oncely_admin_actions_total', [action, 'denied']), 0);
      expect(counted).toBe(denied);
    });

    it("makes the same changes sent as this host's own page sends them", async () => {
      state.payDown = false;
      const own = { 'content-type': 'application/json', origin: running.base, 'sec-fetch-site': 'same-origin' };
      expect((await post(`flows/${failed}/retry`, own, '{}')).status).toBe(200);
      expect((await post(`flows/${waiting}/cancel`, own, '{}')).json.data).toMatchObject({ status: 'cancelled' });
      expect((await post('approvals/ap-1/approve', own, '{}')).json.data).toMatchObject({ status: 'approved' });
      expect((await post('events/dead/replay', own, '{"all":true}')).json.data).toEqual({ replayed: 1 });
      // A client that is not a browser (curl, a script) sends no Origin: JSON is all it needs.
      const plain = await post('approvals/ap-1/reject', { 'content-type': 'application/json; charset=utf-8' }, '{}');
      expect([plain.status, plain.json.error?.code]).toEqual([409, 'APPROVAL_DECIDED']);
      await until(
        'the retried flow to complete',
        async () => (await running.host.flows?.get(failed))?.status,
        (s) => s === 'completed',
      );
      await until(
        'the replayed event to apply',
        async () => (await running.host.events.get('shop', 'evt-1'))?.status,
        (s) => s === 'applied',
      );
      expect((await getApproval(db, 'ap-1'))?.decidedBy).toBe(token ? 'admin:token' : 'admin:loopback');
    });
  },
);
