/**
 * The proof across processes, on SQLite and PostgreSQL: 4 processes x 25 concurrent calls
 * of one intent execute once and charge one credit; a process killed with SIGKILL after the send
 * and before the record is taken over after its lease, the retry carries the same key downstream,
 * and the dead process's reservation is reused, never doubled nor leaked.
 */
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { dropSchema, freshSchema, POSTGRES_URL } from '../support/postgres.js';
import { SELECTED_STORES, type StoreName } from '../support/store-filter.js';
import { harness, LEASE, makeSink } from './support/agent-processes.js';
import { type Backend, NOTICE } from './support/agent-worker.js';

const KEY = 'sendReviewNotice:T-9:u-7:review:2';

function describeProcesses(name: string, backend: () => Backend, cleanup?: () => Promise<void>) {
  // A store ONCELY_STORES leaves out registers nothing.
  if (!SELECTED_STORES.has(name as StoreName)) return;
  describe(`agent tools across processes: ${name}`, () => {
    let spec: Backend;
    beforeAll(() => {
      spec = backend();
    });
    afterAll(async () => {
      await cleanup?.();
    });

    const { local, burst, crashAfterSend } = harness(() => spec);

    it('4 processes x 25 concurrent calls of one intent: one execution, one credit, the rest already_sent', async () => {
      const sink = makeSink();
      const { agent, tenant, reserved, close } = await local(sink.path, 10);
      try {
        const results = await burst({ tenant, sink: sink.path });
        expect(results).toHaveLength(100);
        const states = results.map((r) => r.deliveryState);
        expect(states.filter((s) => s === 'sent')).toHaveLength(1);
        expect(states.filter((s) => s === 'already_sent')).toHaveLength(99);
        expect(new Set(results.map((r) => r.actionId)).size).toBe(1);
        expect(sink.deliveries()).toHaveLength(1);
        expect(sink.emails(KEY)).toHaveLength(1);
        expect(await agent.credits.balance(tenant)).toBe(9);
        expect(await agent.credits.reservation(results[0]?.actionId as string)).toMatchObject({
          status: 'confirmed',
          credits: 1,
        });
        expect(await reserved()).toBe(0);
      } finally {
        await close();
      }
    });

    it('SIGKILL after the send, before the record: the retry carries the same key, one e-mail, one credit', async () => {
      const { sink, agent, tenant, reserved, close } = await crashAfterSend();
      try {
        // Called at once: the runtime waits out the dead holder's lease, then takes over.
        const started = Date.now();
        const retried = await agent.call('sendReviewNotice', NOTICE);
        expect(retried).toMatchObject({
          success: true,
          deliveryState: 'sent',
          idempotencyKey: KEY,
          data: { attempt: 2, by: process.pid },
        });
        expect(Date.now() - started).toBeLessThan(LEASE + 5_000);
        // Downstream: two delivery attempts with the same key, one e-mail (the dead worker's).
        const deliveries = sink.deliveries();
        expect(deliveries.map((d) => [d.idempotency_key, d.attempt])).toEqual([
          [KEY, 1],
          [KEY, 2],
        ]);
        expect(deliveries[1]?.sent_by).toBe(`pid ${process.pid}`);
        const emails = sink.emails(KEY);
        expect(emails).toHaveLength(1);
        expect(emails[0]?.sent_by).toBe(deliveries[0]?.sent_by);
        // The dead worker's reservation was reused and confirmed: one credit, nothing left reserved.
        expect(await agent.credits.balance(tenant)).toBe(9);
        expect(await agent.credits.reservation(retried.actionId as string)).toMatchObject({ status: 'confirmed' });
        expect(await reserved()).toBe(0);
        expect(await agent.call('sendReviewNotice', NOTICE)).toMatchObject({
          deliveryState: 'already_sent',
          firstExecutedAt: retried.firstExecutedAt,
        });
        expect(sink.deliveries()).toHaveLength(2);
        expect(await agent.credits.balance(tenant)).toBe(9);
      } finally {
        await close();
      }
    });

    it('SIGKILL after the send, the sweep releases the dead reservation, then the retry: still one credit', async () => {
      const { sink, agent, tenant, reserved, close } = await crashAfterSend({ reservationTtl: 100 });
      try {
        // sleep: the reservation's 100 ms TTL must pass before the sweep may release it.
        await new Promise((r) => setTimeout(r, 150));
        expect(await agent.credits.sweep()).toBeGreaterThanOrEqual(1);
        expect(await agent.credits.balance(tenant)).toBe(10);
        expect(await reserved()).toBe(0);
        const retried = await agent.call('sendReviewNotice', NOTICE);
        expect(retried).toMatchObject({ deliveryState: 'sent', data: { attempt: 2 } });
        expect(sink.emails(KEY)).toHaveLength(1);
        expect(sink.deliveries()).toHaveLength(2);
        expect(await agent.credits.balance(tenant)).toBe(9);
        expect(await agent.credits.reservation(retried.actionId as string)).toMatchObject({ status: 'confirmed' });
        expect(await reserved()).toBe(0);
      } finally {
        await close();
      }
    });
  });
}

describeProcesses('sqlite', () => ({
  kind: 'sqlite',
  path: join(mkdtempSync(join(tmpdir(), 'oncely-agent-proc-')), 'shared.db'),
}));

const schema = freshSchema();
describeProcesses(
  'postgres',
  () => ({ kind: 'postgres', url: POSTGRES_URL, schema }),
  () => dropSchema(schema),
);
