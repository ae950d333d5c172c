/**
 * The charge invariant across processes, on SQLite and PostgreSQL, with a finite-TTL tool (the
 * permanent one is processes.test.ts's): after its record expired, 4 processes x 25 calls of the
 * same action neither run nor charge again, a new run id is a new action charged once; a process
 * killed with SIGKILL after the send is taken over and charged once, and after expiry not again.
 */
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { dropSchema, freshSchema, POSTGRES_URL } from '../support/postgres.js';
import { harness, makeSink, sleep } from './support/agent-processes.js';
import { type Backend, DIGEST, DIGEST_TTL_MS } from './support/agent-worker.js';

function describeProcesses(name: string, backend: () => Backend, cleanup?: () => Promise<void>) {
  describe(`agent charges across processes: ${name}`, () => {
    let spec: Backend;
    beforeAll(() => {
      spec = backend();
    });
    afterAll(async () => {
      await cleanup?.();
    });
    const { local, burst, crashAfterSend } = harness(() => spec);

    // The charge invariant with a finite TTL: the record expires, the action's charge does not.
    it('a finite-TTL tool: after its record expired, 4 x 25 calls of the action neither run nor charge again; a new run id charges once', async () => {
      const sink = makeSink();
      const { agent, tenant, reserved, close } = await local(sink.path, 10);
      try {
        const first = await agent.call('sendDigest', DIGEST);
        expect(first.deliveryState).toBe('sent');
        expect(await agent.credits.balance(tenant)).toBe(9);
        // sleep: the record's finite TTL must run out (the test is about what happens after it expired).
        await sleep(DIGEST_TTL_MS + 300);
        // Expired: every process may claim the key again, and each finds the action charged.
        const after = await burst({ tenant, sink: sink.path, tool: 'sendDigest' });
        expect(after.map((r) => r.deliveryState)).toEqual(Array(100).fill('already_sent'));
        expect(new Set(after.map((r) => r.actionId))).toEqual(new Set([first.actionId]));
        expect(sink.deliveries()).toHaveLength(1);
        expect(await agent.credits.balance(tenant)).toBe(9);
        // Another run is another action: one execution, one more credit.
        const next = await agent.call('sendDigest', { ...DIGEST, runId: 'run-2' });
        expect(next).toMatchObject({ deliveryState: 'sent' });
        expect(next.actionId).not.toBe(first.actionId);
        expect(sink.deliveries()).toHaveLength(2);
        expect(await agent.credits.balance(tenant)).toBe(8);
        expect(await reserved()).toBe(0);
      } finally {
        await close();
      }
    });

    it('SIGKILL after the send of a finite-TTL tool: the takeover charges once; after expiry the action is not charged again', async () => {
      const { sink, agent, tenant, reserved, close } = await crashAfterSend({ tool: 'sendDigest' });
      try {
        const retried = await agent.call('sendDigest', DIGEST);
        expect(retried).toMatchObject({ deliveryState: 'sent', data: { attempt: 2 } });
        expect(sink.deliveries().map((d) => d.attempt)).toEqual([1, 2]);
        expect(await agent.credits.balance(tenant)).toBe(9);
        expect(await reserved()).toBe(0);
        // sleep: the record's finite TTL must run out (the test is about what happens after it expired).
        await sleep(DIGEST_TTL_MS + 300);
        const later = await agent.call('sendDigest', DIGEST);
        expect(later).toMatchObject({ deliveryState: 'already_sent', actionId: retried.actionId, data: null });
        expect(sink.deliveries()).toHaveLength(2);
        expect(await agent.credits.balance(tenant)).toBe(9);
      } finally {
        await close();
      }
    });
  });
}

describeProcesses('sqlite', () => ({
  kind: 'sqlite',
  path: join(mkdtempSync(join(tmpdir(), 'oncely-agent-charges-')), 'shared.db'),
}));

const schema = freshSchema();
describeProcesses(
  'postgres',
  () => ({ kind: 'postgres', url: POSTGRES_URL, schema }),
  () => dropSchema(schema),
);
