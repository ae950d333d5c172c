/**
 * An agent tool's `reconcile`: registered by the runtime under the action its calls run as
 * (`tool:<name>`), asked by `once.reconcile` about an unknown call by the key the tool gave the
 * mailer; the model's next call of that intent is `already_sent` with the mailer's answer, and
 * nothing is sent twice. On SQLite.
 */
import { randomUUID } from 'node:crypto';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { createAgentRuntime, defineTool } from '../../src/agent/index.js';
import { fingerprint } from '../../src/core/fingerprint.js';
import { openDb } from '../../src/db/index.js';
import { createOncely } from '../../src/index.js';
import { sqliteStore } from '../../src/sqlite/index.js';

describe('reconcile of an agent tool', () => {
  const dir = mkdtempSync(join(tmpdir(), 'oncely-reconcile-agent-'));
  const closing: (() => Promise<void>)[] = [];
  afterAll(async () => {
    for (const close of closing) await close();
  });

  it('settles an unknown call with what the mailer says it sent; the next call is already_sent', async () => {
    const store = sqliteStore({ path: join(dir, 'records.db') });
    const once = await createOncely({ store, tenant: 'acme' });
    const db = await openDb(join(dir, 'agent.db'));
    closing.push(
      () => once.close(),
      () => db.close(),
    );
    // The mailer sent the notice of T-1 (the holder died before its outcome was stored); it knows it by key.
    const mailbox = new Map([['notify:T-1', { messageId: 'm-7' }]]);
    const sends: string[] = [];
    const notify = defineTool({
      name: 'notify',
      description: 'Sends the notice of a task.',
      input: z.object({ taskId: z.string(), body: z.string() }),
      idempotency: { keyFields: ['taskId'], ttl: 'permanent' },
      execute: async (_input, ctx) => {
        sends.push(ctx.idempotencyKey);
        return { messageId: 'm-new' };
      },
      reconcile: (record) => {
        const sent = mailbox.get(record.key);
        return sent ? { value: sent } : 'retry';
      },
    });
    expect(() => defineTool({ ...notify, name: 'broken', reconcile: 'no' as never })).toThrow(
      expect.objectContaining({ code: 'INVALID_ARGUMENT' }),
    );
    const agent = await createAgentRuntime({ once, db, tools: [notify], tenant: 'acme' });
    const at = Date.now() - 600_000;
    await store.insertOrGet({
      tenant: 'acme',
      action: 'tool:notify',
      key: 'notify:T-1',
      state: 'unknown',
      // The runtime fingerprints a call by its key fields.
      fingerprint: fingerprint({ taskId: 'T-1' }),
      fence: 1,
      attempts: 1,
      leaseUntil: null,
      result: null,
      traceId: randomUUID(),
      createdAt: at,
      updatedAt: at,
      completedAt: null,
      expiresAt: null,
    });
    const before = await agent.call('notify', { taskId: 'T-1', body: 'ready' });
    expect(before).toMatchObject({ success: false, deliveryState: 'unknown' });
    const report = await once.reconcile();
    expect(report.settled).toEqual([{ ref: 'acme/tool%3Anotify/notify%3AT-1', answer: 'value' }]);
    const after = await agent.call('notify', { taskId: 'T-1', body: 'ready' });
    expect(after).toMatchObject({ success: true, deliveryState: 'already_sent', data: { messageId: 'm-7' } });
    expect(sends).toEqual([]);
  });
});
