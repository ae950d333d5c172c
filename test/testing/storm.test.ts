/**
 * storm() on each kind of caller: a plain function with no protection (caught), a wrapped one, an
 * Express route behind the fault proxy that loses an answer, an agent tool, a flow start, and the
 * same charge from two child processes at once against a recording gateway.
 */
import { mkdtempSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import express from 'express';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { createAgentRuntime, defineTool } from '../../src/agent/index.js';
import { openDb } from '../../src/db/index.js';
import { idempotency } from '../../src/express/index.js';
import { createFlows, defineFlow } from '../../src/flows/index.js';
import { createOncely, type Oncely } from '../../src/index.js';
import { sqliteStore } from '../../src/sqlite/index.js';
import { faultProxy, recordingDownstream, StormFailedError, storm } from '../../src/testing/index.js';

const dir = mkdtempSync(join(tmpdir(), 'oncely-storm-'));
let once: Oncely;
beforeAll(async () => {
  once = await createOncely({ store: sqliteStore({ path: join(dir, 'records.db') }), tenant: 'acme' });
});
afterAll(() => once.close());

describe('storm', () => {
  it('catches a plain function with no idempotency: every call is an effect, and the failure says how many', async () => {
    const sent: string[] = [];
    const send = async (to: string) => {
      sent.push(to);
      return { messageId: `m${sent.length}` };
    };
    const failure = await storm({ name: 'send mail', run: () => send('a@b'), effects: () => sent.length }).catch(
      (e: unknown) => e,
    );
    expect(failure).toBeInstanceOf(StormFailedError);
    const { message, report } = failure as StormFailedError;
    expect(message).toContain('send mail: 13 effects where 1 was expected, after 13 calls (ok 13)');
    expect(report.calls).toHaveLength(13);
    // A summary line, the header, its rule, one row per caller.
    expect(report.table.split('\n')).toHaveLength(3 + 13);
  });

  it('a wrapped function: 3 sequential and 10 concurrent calls, one execution, everyone gets the one result', async () => {
    let charges = 0;
    const charge = once.wrap(
      { action: 'charge', key: (i: { orderId: string }) => [i.orderId, 'charge'], wait: '10s' },
      async (i) => {
        charges++;
        // sleep: the charge takes a while, so the concurrent calls meet it in progress.
        await new Promise((r) => setTimeout(r, 50));
        return { chargeId: `ch_${charges}`, orderId: i.orderId };
      },
    );
    const report = await storm({ run: () => charge({ orderId: 'ORD-1' }), effects: () => charges });
    expect(report).toMatchObject({ effects: 1, bodyRan: 1, got: { executed: 1, replayed: 12 }, ok: true });
    expect(new Set(report.calls.map((c) => JSON.stringify(c.value)))).toEqual(
      new Set([JSON.stringify({ chargeId: 'ch_1', orderId: 'ORD-1' })]),
    );
  });

  it('an HTTP route behind a proxy that loses the first answer: the retries replay, one order row', async () => {
    const orders: string[] = [];
    const app = express();
    app.use(express.json());
    app.post('/orders', idempotency({ once }), (req, res) => {
      orders.push(req.body.sku);
      res.status(201).json({ orderId: `ord_${orders.length}` });
    });
    const server = createServer(app);
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const target = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    const proxy = await faultProxy({ target, plan: [{ nth: 1, fault: 'drop-response' }] });
    const post = async () => {
      const res = await fetch(`${proxy.url}/orders`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'idempotency-key': 'order-7' },
        body: JSON.stringify({ sku: 'TEA-1' }),
      });
      // Shaped as a RunResult ({ value, replayed }): the report counts executions and replays from it.
      const value = { status: res.status, body: await res.json() };
      return { value, replayed: res.headers.get('idempotent-replayed') === 'true' };
    };
    try {
      const report = await storm({
        name: 'POST /orders',
        run: post,
        sequential: 3,
        concurrent: 5,
        effects: () => orders.length,
      });
      // The first call lost its answer (a network error) after the order was made.
      expect(report.calls[0]).toMatchObject({ ok: false });
      expect(report.calls.slice(1).every((c) => c.ok)).toBe(true);
      // Every later call, at once or not, replays the stored 201 of the one order.
      expect(report.calls.slice(1).map((c) => [(c.value as { status: number }).status, c.replayed])).toEqual(
        Array.from({ length: 7 }, () => [201, true]),
      );
      expect(proxy.requests[0]).toMatchObject({ fault: 'drop-response', upstreamStatus: 201 });
    } finally {
      await proxy.close();
      await new Promise((resolve) => server.close(resolve));
    }
  });

  it('an agent tool: one send, however the model repeats the call', async () => {
    const sent: string[] = [];
    const db = await openDb(join(dir, 'agent.db'));
    const tool = defineTool({
      name: 'sendNotice',
      description: 'Sends a notice.',
      input: z.object({ taskId: z.string(), body: z.string() }),
      idempotency: { keyFields: ['taskId'], ttl: '1h' },
      execute: async (input) => {
        sent.push(input.taskId);
        return { messageId: `msg-${sent.length}` };
      },
    });
    const agent = await createAgentRuntime({ once, db, tools: [tool], tenant: 'acme' });
    try {
      const report = await storm({
        name: 'sendNotice',
        run: () => agent.call('sendNotice', { taskId: 'T-1', body: 'ready' }),
        effects: () => sent.length,
      });
      expect(report.effects).toBe(1);
      expect(report.calls.filter((c) => c.ok)).toHaveLength(13);
    } finally {
      await db.close();
    }
  });

  it('a flow start: one run of the flow and its step', async () => {
    let steps = 0;
    const db = await openDb(join(dir, 'flows.db'));
    const def = defineFlow<{ order: string }, string>('fulfil', { seed: ['order'] }, (run, input) =>
      run.step('ship', () => `shipped ${input.order} #${++steps}`),
    );
    const flows = await createFlows({ db, flows: [def], poll: '20ms' });
    await flows.startWorker();
    try {
      const report = await storm({
        name: 'start fulfil',
        run: async () => {
          const started = await flows.start(def, { order: 'ORD-9' });
          return { value: await flows.result(started.workflowId, { timeout: '10s' }), replayed: started.already };
        },
        effects: () => steps,
      });
      expect(report).toMatchObject({ effects: 1, got: { executed: 1, replayed: 12 } });
    } finally {
      await flows.stop();
      await db.close();
    }
  });

  it('across two child processes and this one at once: one charge at the gateway', async () => {
    const gateway = await recordingDownstream();
    const input = { db: join(dir, 'shared.db'), gateway: gateway.url, orderId: 'ORD-P' };
    const module = fileURLToPath(new URL('./fixtures/charge.ts', import.meta.url));
    const { charge } = await import('./fixtures/charge.js');
    try {
      const report = await storm({
        run: () => charge(input),
        sequential: 1,
        concurrent: 5,
        processes: 2,
        child: { module, export: 'charge', input },
        effects: () => gateway.effects.length,
      });
      expect(report.calls.map((c) => c.phase).filter((p) => p.startsWith('process'))).toHaveLength(10);
      expect(report.calls.filter((c) => c.replayed === false)).toHaveLength(1);
      expect(report.effects).toBe(1);
    } finally {
      await gateway.close();
    }
  }, 60_000);

  it('refuses processes without a child, and counts that are not whole numbers, with INVALID_ARGUMENT', async () => {
    await expect(storm({ run: () => 1, processes: 1, effects: () => 1 })).rejects.toMatchObject({
      code: 'INVALID_ARGUMENT',
    });
    await expect(storm({ run: () => 1, concurrent: -1, effects: () => 1 })).rejects.toMatchObject({
      code: 'INVALID_ARGUMENT',
    });
  });
});
