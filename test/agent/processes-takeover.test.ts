/**
 * The charge invariant with the two amplifiers at once, on SQLite and PostgreSQL: a worker killed
 * with SIGKILL after its send (claim and reservation held, no record of the outcome), then 4
 * processes x 25 concurrent calls of the same intent race for its expired claim. For the permanent
 * sendReviewNotice and the finite-TTL sendDigest: one of the 100 executes again (with the same key
 * downstream: the mailer's e-mail stays the dead worker's one), the other 99 read already_sent, the
 * dead worker's reservation is the one confirmed: one credit. For sendDigest, after its record
 * expired, the same action is not charged again.
 */
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { dropSchema, freshSchema, POSTGRES_URL } from '../support/postgres.js';
import { SELECTED_STORES, type StoreName } from '../support/store-filter.js';
import { harness, sleep } from './support/agent-processes.js';
import { type Backend, DIGEST, DIGEST_TTL_MS, NOTICE, type ToolName } from './support/agent-worker.js';

const KEYS: Record<ToolName, string> = {
  sendReviewNotice: 'sendReviewNotice:T-9:u-7:review:2',
  sendDigest: 'sendDigest:T-9:u-7:run-1',
};

function describeProcesses(name: string, backend: () => Backend, cleanup?: () => Promise<void>) {
  // A store ONCELY_STORES leaves out registers nothing.
  if (!SELECTED_STORES.has(name as StoreName)) return;
  describe(`agent takeover race across processes: ${name}`, () => {
    let spec: Backend;
    beforeAll(() => {
      spec = backend();
    });
    afterAll(async () => {
      await cleanup?.();
    });
    const { burst, crashAfterSend } = harness(() => spec);

    for (const tool of ['sendReviewNotice', 'sendDigest'] as const)
      it(`${tool}: SIGKILL after the send, then 4 x 25 calls race for the dead claim: one execution, one e-mail, one credit`, async () => {
        const { sink, agent, tenant, reserved, close } = await crashAfterSend({ tool });
        try {
          const results = await burst({ tenant, sink: sink.path, tool });
          expect(results).toHaveLength(100);
          const sent = results.filter((r) => r.deliveryState === 'sent');
          expect(sent).toHaveLength(1);
          expect(results.filter((r) => r.deliveryState === 'already_sent')).toHaveLength(99);
          expect(results.filter((r) => r.error !== null)).toEqual([]);
          expect(new Set(results.map((r) => r.actionId)).size).toBe(1);
          // Downstream: the dead worker's delivery and the one re-execution, under one key; one e-mail.
          const deliveries = sink.deliveries();
          expect(deliveries).toHaveLength(2);
          expect(new Set(deliveries.map((d) => d.idempotency_key))).toEqual(new Set([KEYS[tool]]));
          expect(deliveries[1]?.attempt).toBe(sent[0]?.attempt);
          expect(sink.emails(KEYS[tool])).toHaveLength(1);
          // The dead worker's reservation reused and confirmed: one credit, nothing left reserved.
          const actionId = sent[0]?.actionId as string;
          expect(await agent.credits.balance(tenant)).toBe(9);
          expect(await agent.credits.reservation(actionId)).toMatchObject({ status: 'confirmed', credits: 1 });
          expect(await agent.credits.chargedAt(actionId)).not.toBeNull();
          expect(await reserved()).toBe(0);
          if (tool === 'sendDigest') {
            // Its record expires; its charge does not: the same action again neither runs nor charges.
            // sleep: the digest's record TTL must run out.
            await sleep(DIGEST_TTL_MS + 300);
            const later = await agent.call(tool, DIGEST);
            expect(later).toMatchObject({ deliveryState: 'already_sent', actionId, data: null });
          } else {
            expect(await agent.call(tool, NOTICE)).toMatchObject({ deliveryState: 'already_sent', actionId });
          }
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
  path: join(mkdtempSync(join(tmpdir(), 'oncely-agent-takeover-')), 'shared.db'),
}));

const schema = freshSchema();
describeProcesses(
  'postgres',
  () => ({ kind: 'postgres', url: POSTGRES_URL, schema }),
  () => dropSchema(schema),
);
