/**
 * The agent runtime on SQLite and PostgreSQL: declared keys, already_sent, KEY_REQUIRED, one
 * execution and one credit under parallel calls, BUDGET_EXCEEDED, failures that release their
 * reservation, approvals bound to content (approve twice, content changed, reject, expiry), the
 * reservation sweep and registry.describe().
 */
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { createAgentRuntime, createRegistry, defineTool } from '../../src/agent/index.js';
import { openDb } from '../../src/db/index.js';
import type { Db } from '../../src/db/types.js';
import { createOncely, type Oncely } from '../../src/index.js';
import { postgresStore } from '../../src/postgres/index.js';
import { sqliteStore } from '../../src/sqlite/index.js';
import { dropSchema, freshSchema, POSTGRES_URL } from '../support/postgres.js';
import { SELECTED_STORES, type StoreName } from '../support/store-filter.js';

// sleep: the helper for the waits below whose duration is the point (a slow mailer, TTLs and approvals running out).
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** The engine and the Db of approvals and credits, on one backend. */
interface Backend {
  once: Oncely;
  db: Db;
  close(): Promise<void>;
}

/** A mailer that records every send it is asked for (no dedupe of its own: the runtime must do it). */
class Mailer {
  readonly sent: { to: string; body: string; idempotencyKey: string; attempt: number }[] = [];
  constructor(private readonly delayMs = 0) {}
  async send(to: string, body: string, ctx: { idempotencyKey: string; attempt: number }) {
    // sleep: a slow mailer, so duplicates meet its send in progress.
    if (this.delayMs) await sleep(this.delayMs);
    this.sent.push({ to, body, idempotencyKey: ctx.idempotencyKey, attempt: ctx.attempt });
    return { messageId: `msg-${this.sent.length}`, to, body };
  }
}

const reviewInput = z.object({
  taskId: z.string(),
  recipientId: z.string(),
  templateId: z.string(),
  entityVersion: z.number(),
  body: z.string(),
});

/** The tool; `approval` and `approvalTtl` vary per test. */
function sendReviewNotice(
  mailer: Mailer,
  options: { approval?: 'required' | 'none'; approvalTtl?: `${number}ms`; fail?: () => boolean } = {},
) {
  return defineTool({
    name: 'sendReviewNotice',
    description: 'Sends the review notice of a task version to one recipient.',
    input: reviewInput,
    idempotency: { keyFields: ['taskId', 'recipientId', 'templateId', 'entityVersion'], ttl: 'permanent' },
    outbound: {
      preview: (i) => ({ to: i.recipientId, body: i.body }),
      approval: options.approval ?? 'none',
      approvalTtl: options.approvalTtl,
    },
    cost: { credits: 1, account: (ctx) => ctx.tenant },
    execute: async (input, ctx) => {
      if (options.fail?.()) throw new Error('SMTP 451: try again later');
      return mailer.send(input.recipientId, input.body, ctx);
    },
  });
}

const notice = (body = 'Task T-1 v3 is ready for your review.') => ({
  taskId: 'T-1',
  recipientId: 'u-42',
  templateId: 'review',
  entityVersion: 3,
  body,
});
const KEY = 'sendReviewNotice:T-1:u-42:review:3';

let tenants = 0;

function describeRuntime(name: string, open: () => Promise<Backend>) {
  // A store ONCELY_STORES leaves out registers nothing.
  if (!SELECTED_STORES.has(name as StoreName)) return;
  describe(`agent runtime: ${name}`, () => {
    let backend: Backend;
    beforeAll(async () => {
      backend = await open();
    });
    afterAll(async () => {
      await backend?.close();
    });

    /** A runtime in a tenant of its own (its own keys and credit account), with `credits` granted. */
    async function runtime(tools: Parameters<typeof createAgentRuntime>[0]['tools'], credits = 10) {
      const tenant = `${name}-tenant-${++tenants}-${Date.now()}`;
      const agent = await createAgentRuntime({ once: backend.once, db: backend.db, tools, tenant });
      if (credits) await agent.credits.grant(tenant, credits);
      return { agent, tenant };
    }

    it('a duplicate gets already_sent: same key and action, the first execution time, continue', async () => {
      const mailer = new Mailer();
      const { agent, tenant } = await runtime([sendReviewNotice(mailer)]);
      const first = await agent.call('sendReviewNotice', notice());
      expect(first).toMatchObject({
        success: true,
        deliveryState: 'sent',
        nextAction: 'continue',
        idempotencyKey: KEY,
        data: { messageId: 'msg-1', to: 'u-42' },
      });
      expect(first.actionId).toMatch(/^[0-9a-f-]{36}$/);
      expect(first.traceId).toEqual(expect.any(String));
      expect(first.firstExecutedAt).toEqual(expect.any(Number));
      // sleep: time moves on, so a firstExecutedAt taken from the clock instead of the record would differ.
      await sleep(5);
      const second = await agent.call('sendReviewNotice', notice());
      expect(second).toMatchObject({
        success: true,
        deliveryState: 'already_sent',
        nextAction: 'continue',
        idempotencyKey: first.idempotencyKey,
        actionId: first.actionId,
        traceId: first.traceId,
        firstExecutedAt: first.firstExecutedAt,
        data: first.data,
      });
      expect(second.requestId).not.toBe(first.requestId);
      expect(second.message).toMatch(/do not send again/);
      expect(mailer.sent).toEqual([{ to: 'u-42', body: notice().body, idempotencyKey: KEY, attempt: 1 }]);
      expect(await agent.credits.balance(tenant)).toBe(9);
      expect(await agent.credits.reservation(first.actionId as string)).toEqual({
        account: tenant,
        credits: 1,
        status: 'confirmed',
      });
    });

    it('a rephrased body of the same intent gets the first result, not a second e-mail', async () => {
      const mailer = new Mailer();
      const { agent, tenant } = await runtime([sendReviewNotice(mailer)]);
      const first = await agent.call('sendReviewNotice', notice('Please review T-1 (v3).'));
      const rephrased = await agent.call('sendReviewNotice', notice('Hi! T-1 version 3 awaits your review :)'));
      expect(first.deliveryState).toBe('sent');
      expect(rephrased).toMatchObject({
        deliveryState: 'already_sent',
        data: { body: 'Please review T-1 (v3).' },
        firstExecutedAt: first.firstExecutedAt,
      });
      expect(mailer.sent.map((m) => m.body)).toEqual(['Please review T-1 (v3).']);
      expect(await agent.credits.balance(tenant)).toBe(9);
      // Another version is another intent.
      const next = await agent.call('sendReviewNotice', { ...notice(), entityVersion: 4 });
      expect(next).toMatchObject({ deliveryState: 'sent', idempotencyKey: 'sendReviewNotice:T-1:u-42:review:4' });
      expect(await agent.credits.balance(tenant)).toBe(8);
    });

    it('20 identical calls at once: one execution, one credit, the others already_sent', async () => {
      const mailer = new Mailer(50);
      const { agent, tenant } = await runtime([sendReviewNotice(mailer)]);
      const results = await Promise.all(Array.from({ length: 20 }, () => agent.call('sendReviewNotice', notice())));
      const states = results.map((r) => r.deliveryState);
      expect(states.filter((s) => s === 'sent')).toHaveLength(1);
      expect(states.filter((s) => s === 'already_sent')).toHaveLength(19);
      expect(new Set(results.map((r) => r.actionId)).size).toBe(1);
      expect(new Set(results.map((r) => r.firstExecutedAt)).size).toBe(1);
      expect(mailer.sent).toHaveLength(1);
      expect(await agent.credits.balance(tenant)).toBe(9);
      expect((await agent.credits.reservation(results[0]?.actionId as string))?.status).toBe('confirmed');
    });

    it('the same intent in two tenants runs once in each, charged to each', async () => {
      const mailer = new Mailer();
      const { agent, tenant } = await runtime([sendReviewNotice(mailer)]);
      const other = `${tenant}-other`;
      await agent.credits.grant(other, 3);
      const a = await agent.call('sendReviewNotice', notice());
      const b = await agent.call('sendReviewNotice', notice(), { tenant: other });
      expect([a.deliveryState, b.deliveryState]).toEqual(['sent', 'sent']);
      expect(a.actionId).not.toBe(b.actionId);
      expect(await agent.credits.balance(tenant)).toBe(9);
      expect(await agent.credits.balance(other)).toBe(2);
    });

    it('a missing key field is KEY_REQUIRED, told to the model, and nothing runs', async () => {
      let executed = 0;
      const loose = defineTool({
        name: 'sendLooseNotice',
        description: 'A notice whose schema lets key fields be left out.',
        input: z.object({
          taskId: z.string(),
          recipientId: z.string().optional(),
          entityVersion: z.number().optional(),
          body: z.string(),
        }),
        idempotency: { keyFields: ['taskId', 'recipientId', 'entityVersion'], ttl: 'permanent' },
        cost: { credits: 1, account: (ctx) => ctx.tenant },
        execute: async () => ++executed,
      });
      const { agent, tenant } = await runtime([loose]);
      const result = await agent.call('sendLooseNotice', { taskId: 'T-1', recipientId: 'u-42', body: 'hi' });
      expect(result).toMatchObject({
        success: false,
        deliveryState: 'failed',
        nextAction: 'stop',
        idempotencyKey: null,
        actionId: null,
        error: { code: 'KEY_REQUIRED' },
      });
      expect(result.error?.message).toMatch(/entityVersion is missing/);
      expect(result.message).toMatch(/the key fields are taskId, recipientId, entityVersion/);
      expect(executed).toBe(0);
      expect(await agent.credits.balance(tenant)).toBe(10);
      // With every key field the same tool runs.
      const ok = await agent.call('sendLooseNotice', {
        taskId: 'T-1',
        recipientId: 'u-42',
        entityVersion: 1,
        body: 'hi',
      });
      expect(ok).toMatchObject({ deliveryState: 'sent', idempotencyKey: 'sendLooseNotice:T-1:u-42:1' });
      expect(executed).toBe(1);
    });

    it('an invalid input and an unknown tool are envelopes too, never exceptions', async () => {
      const { agent } = await runtime([sendReviewNotice(new Mailer())], 0);
      expect(await agent.call('sendReviewNotice', { ...notice(), entityVersion: 'three' })).toMatchObject({
        deliveryState: 'failed',
        error: { code: 'INPUT_INVALID' },
      });
      expect(await agent.call('sendFax', {})).toMatchObject({
        deliveryState: 'failed',
        error: { code: 'TOOL_UNKNOWN' },
      });
    });

    it('BUDGET_EXCEEDED when the balance is short: nothing runs, nothing is reserved, the balance is unchanged', async () => {
      const mailer = new Mailer();
      const { agent, tenant } = await runtime([sendReviewNotice(mailer)], 0);
      await agent.credits.grant(tenant, 0);
      const result = await agent.call('sendReviewNotice', notice());
      expect(result).toMatchObject({
        success: false,
        deliveryState: 'failed',
        nextAction: 'stop',
        idempotencyKey: KEY,
        error: { code: 'BUDGET_EXCEEDED' },
      });
      expect(mailer.sent).toHaveLength(0);
      expect(await agent.credits.reservation(result.actionId as string)).toBeNull();
      expect(await agent.credits.balance(tenant)).toBe(0);
      // A duplicate is refused the same way; after a top-up the intent runs, once.
      expect((await agent.call('sendReviewNotice', notice())).error?.code).toBe('BUDGET_EXCEEDED');
      await agent.credits.grant(tenant, 1);
      expect((await agent.call('sendReviewNotice', notice())).deliveryState).toBe('sent');
      expect((await agent.call('sendReviewNotice', notice())).deliveryState).toBe('already_sent');
      expect(mailer.sent).toHaveLength(1);
      expect(await agent.credits.balance(tenant)).toBe(0);
    });

    it('a tool that throws: failed, reservation released, balance restored; a later call executes again', async () => {
      const mailer = new Mailer();
      let failures = 1;
      const { agent, tenant } = await runtime([sendReviewNotice(mailer, { fail: () => failures-- > 0 })]);
      const failed = await agent.call('sendReviewNotice', notice());
      expect(failed).toMatchObject({
        success: false,
        deliveryState: 'failed',
        nextAction: 'stop',
        error: { code: 'TOOL_FAILED', message: 'SMTP 451: try again later' },
      });
      expect(mailer.sent).toHaveLength(0);
      expect(await agent.credits.reservation(failed.actionId as string)).toMatchObject({ status: 'released' });
      expect(await agent.credits.balance(tenant)).toBe(10);
      const retried = await agent.call('sendReviewNotice', notice());
      expect(retried).toMatchObject({ deliveryState: 'sent', actionId: failed.actionId });
      expect(mailer.sent).toEqual([{ to: 'u-42', body: notice().body, idempotencyKey: KEY, attempt: 2 }]);
      expect(await agent.credits.reservation(failed.actionId as string)).toMatchObject({ status: 'confirmed' });
      expect(await agent.credits.balance(tenant)).toBe(9);
    });

    describe('approvals', () => {
      it('pending_approval, then approve sends exactly the previewed content, once; approving again is already_sent', async () => {
        const mailer = new Mailer();
        const { agent, tenant } = await runtime([sendReviewNotice(mailer, { approval: 'required' })]);
        const pending = await agent.call('sendReviewNotice', notice());
        expect(pending).toMatchObject({
          success: false,
          deliveryState: 'pending_approval',
          nextAction: 'wait',
          idempotencyKey: KEY,
          approvalId: pending.actionId,
        });
        expect(mailer.sent).toHaveLength(0);
        const id = pending.approvalId as string;
        const stored = await agent.approval(id);
        expect(stored).toMatchObject({
          id,
          tenant,
          tool: 'sendReviewNotice',
          idempotencyKey: KEY,
          status: 'pending',
          preview: { to: 'u-42', body: notice().body },
          input: notice(),
          decidedBy: null,
          decidedAt: null,
        });
        expect(stored?.contentHash).toMatch(/^[0-9a-f]{64}$/);
        expect((await agent.approvals('pending')).map((a) => a.id)).toContain(id);
        // Asking again while it waits changes nothing.
        expect(await agent.call('sendReviewNotice', notice())).toMatchObject({
          deliveryState: 'pending_approval',
          approvalId: id,
        });
        expect(await agent.credits.balance(tenant)).toBe(10);

        const before = Date.now();
        const approved = await agent.approve(id, { approver: 'alice' });
        expect(approved).toMatchObject({
          success: true,
          deliveryState: 'sent',
          nextAction: 'continue',
          approvalId: id,
          data: { to: 'u-42', body: notice().body },
        });
        expect(mailer.sent.map((m) => m.body)).toEqual([notice().body]);
        const decided = await agent.approval(id);
        expect(decided).toMatchObject({ status: 'approved', decidedBy: 'alice', reason: null });
        expect(decided?.decidedAt).toBeGreaterThanOrEqual(before);

        const again = await agent.approve(id, { approver: 'bob' });
        expect(again).toMatchObject({ deliveryState: 'already_sent', firstExecutedAt: approved.firstExecutedAt });
        expect(await agent.call('sendReviewNotice', notice())).toMatchObject({ deliveryState: 'already_sent' });
        expect(mailer.sent).toHaveLength(1);
        expect(await agent.approval(id)).toMatchObject({ decidedBy: 'alice', decidedAt: decided?.decidedAt });
        expect(await agent.credits.balance(tenant)).toBe(9);
      });

      it('a call with other content is APPROVAL_CONTENT_CHANGED; approving still sends only the original', async () => {
        const mailer = new Mailer();
        const { agent } = await runtime([sendReviewNotice(mailer, { approval: 'required' })]);
        const pending = await agent.call('sendReviewNotice', notice('Original text.'));
        const changed = await agent.call('sendReviewNotice', notice('Sneaky other text.'));
        expect(changed).toMatchObject({
          success: false,
          deliveryState: 'failed',
          approvalId: pending.approvalId,
          idempotencyKey: KEY,
          error: { code: 'APPROVAL_CONTENT_CHANGED' },
        });
        expect(mailer.sent).toHaveLength(0);
        const approved = await agent.approve(pending.approvalId as string, { approver: 'alice' });
        expect(approved).toMatchObject({ deliveryState: 'sent', data: { body: 'Original text.' } });
        // After the send the other content still cannot go out.
        expect((await agent.call('sendReviewNotice', notice('Sneaky other text.'))).error?.code).toBe(
          'APPROVAL_CONTENT_CHANGED',
        );
        expect(mailer.sent.map((m) => m.body)).toEqual(['Original text.']);
      });

      it('reject is recorded with who, when and why; nothing is sent, ever', async () => {
        const mailer = new Mailer();
        const { agent, tenant } = await runtime([sendReviewNotice(mailer, { approval: 'required' })]);
        const pending = await agent.call('sendReviewNotice', notice());
        const id = pending.approvalId as string;
        const before = Date.now();
        const rejected = await agent.reject(id, { approver: 'carol', reason: 'wrong recipient' });
        expect(rejected).toMatchObject({
          success: false,
          deliveryState: 'rejected',
          nextAction: 'stop',
          approvalId: id,
          error: { code: 'REJECTED', message: 'rejected by carol: wrong recipient' },
        });
        const stored = await agent.approval(id);
        expect(stored).toMatchObject({ status: 'rejected', decidedBy: 'carol', reason: 'wrong recipient' });
        expect(stored?.decidedAt).toBeGreaterThanOrEqual(before);
        // Approving after a rejection, or calling again, sends nothing.
        expect(await agent.approve(id, { approver: 'mallory' })).toMatchObject({
          deliveryState: 'rejected',
          error: { code: 'REJECTED' },
        });
        expect(await agent.call('sendReviewNotice', notice())).toMatchObject({ deliveryState: 'rejected' });
        expect(await agent.approval(id)).toMatchObject({ status: 'rejected', decidedBy: 'carol' });
        expect(mailer.sent).toHaveLength(0);
        expect(await agent.credits.balance(tenant)).toBe(10);
        expect(await agent.credits.reservation(id)).toBeNull();
      });

      it('approving after expiry is rejected with APPROVAL_EXPIRED, recorded, and sends nothing', async () => {
        const mailer = new Mailer();
        const { agent, tenant } = await runtime([
          sendReviewNotice(mailer, { approval: 'required', approvalTtl: '100ms' }),
        ]);
        const pending = await agent.call('sendReviewNotice', notice());
        const id = pending.approvalId as string;
        expect((await agent.approval(id))?.expiresAt).toBeLessThanOrEqual(Date.now() + 100);
        // sleep: the 100 ms approval TTL must run out.
        await sleep(150);
        const late = await agent.approve(id, { approver: 'alice' });
        expect(late).toMatchObject({
          success: false,
          deliveryState: 'rejected',
          nextAction: 'stop',
          approvalId: id,
          error: { code: 'APPROVAL_EXPIRED' },
        });
        const stored = await agent.approval(id);
        expect(stored?.status).toBe('expired');
        expect(stored?.decidedAt).toEqual(expect.any(Number));
        expect(await agent.approve(id, { approver: 'alice' })).toMatchObject({ error: { code: 'APPROVAL_EXPIRED' } });
        expect(await agent.call('sendReviewNotice', notice())).toMatchObject({
          deliveryState: 'rejected',
          error: { code: 'APPROVAL_EXPIRED' },
        });
        expect(mailer.sent).toHaveLength(0);
        expect(await agent.credits.balance(tenant)).toBe(10);
      });

      it('a call after expiry, with nobody having acted, is APPROVAL_EXPIRED rather than a wait that never ends', async () => {
        const mailer = new Mailer();
        const { agent } = await runtime([sendReviewNotice(mailer, { approval: 'required', approvalTtl: '100ms' })]);
        const pending = await agent.call('sendReviewNotice', notice());
        // sleep: the 100 ms approval TTL must run out.
        await sleep(150);
        const late = await agent.call('sendReviewNotice', notice());
        expect(late).toMatchObject({
          deliveryState: 'rejected',
          nextAction: 'stop',
          approvalId: pending.approvalId,
          error: { code: 'APPROVAL_EXPIRED' },
        });
        expect(await agent.approval(pending.approvalId as string)).toMatchObject({ status: 'expired' });
        expect(mailer.sent).toHaveLength(0);
      });

      it('an unknown approval id is APPROVAL_UNKNOWN', async () => {
        const { agent } = await runtime([sendReviewNotice(new Mailer(), { approval: 'required' })], 0);
        expect(await agent.approve('00000000-0000-4000-8000-000000000000', { approver: 'alice' })).toMatchObject({
          deliveryState: 'failed',
          error: { code: 'APPROVAL_UNKNOWN' },
        });
        expect(await agent.reject('00000000-0000-4000-8000-000000000000', { approver: 'alice' })).toMatchObject({
          error: { code: 'APPROVAL_UNKNOWN' },
        });
      });
    });

    describe('credits', () => {
      it('the sweep releases an abandoned reservation; a confirm after the sweep charges again', async () => {
        const { agent, tenant } = await runtime([], 5);
        const action = `abandoned-${tenants}`;
        await agent.credits.reserve(tenant, 2, action, Date.now() - 1);
        expect(await agent.credits.balance(tenant)).toBe(3);
        expect(await agent.credits.reservation(action)).toEqual({ account: tenant, credits: 2, status: 'reserved' });
        // A live reservation is left alone.
        const live = `${action}-live`;
        await agent.credits.reserve(tenant, 1, live, Date.now() + 60_000);
        expect(await agent.credits.sweep()).toBeGreaterThanOrEqual(1);
        expect(await agent.credits.reservation(action)).toMatchObject({ status: 'released' });
        expect(await agent.credits.reservation(live)).toMatchObject({ status: 'reserved' });
        expect(await agent.credits.balance(tenant)).toBe(4);
        // Releasing twice gives nothing back twice.
        await agent.credits.release(action);
        expect(await agent.credits.balance(tenant)).toBe(4);
        // The holder was alive after all and its effect happened: confirming charges the credits again.
        await agent.credits.confirm(action);
        expect(await agent.credits.reservation(action)).toMatchObject({ status: 'confirmed' });
        expect(await agent.credits.balance(tenant)).toBe(2);
        // Confirmed is final: neither release nor a second confirm moves credits.
        await agent.credits.release(action);
        await agent.credits.confirm(action);
        expect(await agent.credits.balance(tenant)).toBe(2);
        await agent.credits.release(live);
        expect(await agent.credits.balance(tenant)).toBe(3);
      });

      it('a confirmed action is charged for good: reserving it again, even after its reservation row is gone, is charged', async () => {
        const { agent, tenant } = await runtime([], 5);
        const action = `charged-${tenants}`;
        expect(await agent.credits.reserve(tenant, 2, action, Date.now() + 60_000)).toBe('reserved');
        expect(await agent.credits.reserve(tenant, 2, action, Date.now() + 60_000)).toBe('held');
        await agent.credits.confirm(action);
        expect(await agent.credits.chargedAt(action)).toEqual(expect.any(Number));
        expect(await agent.credits.reserve(tenant, 2, action, Date.now() + 60_000)).toBe('charged');
        await backend.db.run('DELETE FROM oncely_credit_reservations WHERE action_id = ?', [action]);
        expect(await agent.credits.reserve(tenant, 2, action, Date.now() + 60_000)).toBe('charged');
        expect(await agent.credits.reservation(action)).toBeNull();
        expect(await agent.credits.balance(tenant)).toBe(3);
      });

      it('reserving an action twice holds its credits once; BUDGET_EXCEEDED leaves no reservation', async () => {
        const { agent, tenant } = await runtime([], 2);
        const action = `twice-${tenants}`;
        await Promise.all([
          agent.credits.reserve(tenant, 2, action, Date.now() + 60_000),
          agent.credits.reserve(tenant, 2, action, Date.now() + 60_000),
        ]);
        expect(await agent.credits.balance(tenant)).toBe(0);
        await expect(agent.credits.reserve(tenant, 1, `${action}-b`, Date.now() + 60_000)).rejects.toMatchObject({
          code: 'BUDGET_EXCEEDED',
        });
        expect(await agent.credits.reservation(`${action}-b`)).toBeNull();
        expect(await agent.credits.balance(tenant)).toBe(0);
      });
    });

    // The seed: "cost deduction is deduplicated permanently", bound to the actionId, whatever the TTL.
    it('a finite TTL: after the record expired the same action is neither run nor charged again; another action is', async () => {
      const mailer = new Mailer();
      const short = defineTool({
        name: 'sendShortLived',
        description: 'A notice whose record answers duplicates for 200ms only.',
        input: reviewInput,
        idempotency: {
          keyFields: ['taskId', 'recipientId'],
          fingerprintFields: ['taskId', 'recipientId', 'entityVersion'],
          actionFields: ['entityVersion'],
          ttl: '200ms',
        },
        cost: { credits: 1, account: (ctx) => ctx.tenant },
        execute: (input, ctx) => mailer.send(input.recipientId, input.body, ctx),
      });
      const { agent, tenant } = await runtime([short]);
      const first = await agent.call('sendShortLived', notice());
      expect(first.deliveryState).toBe('sent');
      expect((await agent.call('sendShortLived', notice())).deliveryState).toBe('already_sent');
      // Within the TTL, another action under the same key is the caller's mistake, not a new send.
      expect((await agent.call('sendShortLived', { ...notice(), entityVersion: 4 })).error?.code).toBe('KEY_REUSED');
      // sleep: the 200 ms record TTL must run out.
      await sleep(300);
      const again = await agent.call('sendShortLived', notice());
      expect(again).toMatchObject({
        success: true,
        deliveryState: 'already_sent',
        nextAction: 'continue',
        actionId: first.actionId,
        data: null,
      });
      // When it was charged: the send finished, just before its record was written.
      expect(again.firstExecutedAt).toBe(await agent.credits.chargedAt(first.actionId as string));
      expect(again.firstExecutedAt).toBeLessThanOrEqual(first.firstExecutedAt as number);
      expect(again.message).toMatch(/charged earlier/);
      expect(mailer.sent).toHaveLength(1);
      expect(await agent.credits.balance(tenant)).toBe(9);
      // Another version after expiry is a new action: sent and charged once.
      const next = await agent.call('sendShortLived', { ...notice(), entityVersion: 4 });
      expect(next).toMatchObject({ deliveryState: 'sent' });
      expect(next.actionId).not.toBe(first.actionId);
      expect(mailer.sent).toHaveLength(2);
      expect(await agent.credits.balance(tenant)).toBe(8);
      // The charge outlives its reservation row (retention purges settled ones): still never twice.
      await backend.db.run('DELETE FROM oncely_credit_reservations WHERE action_id = ?', [first.actionId]);
      // sleep: another 200 ms TTL, so the key's record of the second version has run out too.
      await sleep(300);
      expect(await agent.call('sendShortLived', notice())).toMatchObject({ deliveryState: 'already_sent' });
      expect(mailer.sent).toHaveLength(2);
      expect(await agent.credits.balance(tenant)).toBe(8);
      expect(await agent.credits.chargedAt(first.actionId as string)).toBe(again.firstExecutedAt);
    });

    it('refuses a cost with a finite TTL unless actionFields say what makes a new action', () => {
      const declare = (idempotency: Record<string, unknown>) => () =>
        defineTool({
          name: 'sendCharged',
          description: 'A charged notice.',
          input: reviewInput,
          idempotency: { keyFields: ['taskId'], ttl: '1h', ...idempotency },
          cost: { credits: 1, account: (ctx) => ctx.tenant },
          execute: () => 'sent',
        });
      expect(declare({})).toThrow(
        expect.objectContaining({ code: 'INVALID_ARGUMENT', message: expect.stringMatching(/actionFields/) }),
      );
      // Key fields name no new action after expiry; fields outside the fingerprint would replay under another action.
      expect(declare({ actionFields: ['taskId'] })).toThrow(/actionFields must be fingerprint fields/);
      expect(declare({ actionFields: ['entityVersion'] })).toThrow(/actionFields must be fingerprint fields/);
      expect(declare({ actionFields: [] })).toThrow(/actionFields/);
      expect(
        declare({ fingerprintFields: ['taskId', 'entityVersion'], actionFields: ['entityVersion'] }),
      ).not.toThrow();
      expect(declare({ ttl: 'permanent' })).not.toThrow();
    });

    it('idempotency.required is gone: required false is refused, never silently ignored', () => {
      expect(() =>
        defineTool({
          name: 'sendUnkeyed',
          description: 'A notice.',
          input: reviewInput,
          idempotency: { keyFields: ['taskId'], ttl: 'permanent', required: false } as never,
          execute: () => 'sent',
        }),
      ).toThrow(expect.objectContaining({ code: 'INVALID_ARGUMENT', message: expect.stringMatching(/readOnly/) }));
    });

    describe('read-only tools', () => {
      const lookupInput = z.object({ taskId: z.string() });
      it('run every call with no key, no record and no reservation, and answer read', async () => {
        let reads = 0;
        const lookup = defineTool({
          name: 'lookupTask',
          description: 'Reads a task.',
          input: lookupInput,
          readOnly: true,
          execute: (input, ctx) => ({ taskId: input.taskId, reads: ++reads, tenant: ctx.tenant }),
        });
        const { agent, tenant } = await runtime([lookup], 0);
        const first = await agent.call('lookupTask', { taskId: 'T-1' }, { traceId: 'trace-read-1' });
        expect(first).toMatchObject({
          success: true,
          deliveryState: 'read',
          nextAction: 'continue',
          idempotencyKey: null,
          actionId: null,
          traceId: 'trace-read-1',
          data: { taskId: 'T-1', reads: 1, tenant },
        });
        const second = await agent.call('lookupTask', { taskId: 'T-1' });
        expect(second).toMatchObject({ deliveryState: 'read', data: { reads: 2 } });
        expect(second.requestId).not.toBe(first.requestId);
        expect(second.traceId).not.toBe('trace-read-1');
        expect((await backend.once.list({ tenant })).records).toEqual([]);
        const held = await backend.db.all('SELECT * FROM oncely_credit_reservations WHERE account = ?', [tenant]);
        expect(held).toEqual([]);
        expect(await agent.call('lookupTask', { taskId: 7 })).toMatchObject({ error: { code: 'INPUT_INVALID' } });
      });

      it('declare nothing of effects: key fields, an outbound message, a cost or destructive are refused', () => {
        for (const extra of [
          { idempotency: { keyFields: ['taskId'], ttl: 'permanent' } },
          { cost: { credits: 1, account: () => 'a' } },
          { outbound: { preview: () => null } },
          { destructive: true },
        ])
          expect(() =>
            defineTool({
              name: 'lookupTask',
              description: 'Reads a task.',
              input: lookupInput,
              readOnly: true,
              ...(extra as object),
              execute: () => null,
            }),
          ).toThrow(expect.objectContaining({ code: 'INVALID_ARGUMENT', message: expect.stringMatching(/readOnly/) }));
      });
    });

    it('refuses a tool that needs approval unless its records are permanent', () => {
      expect(() =>
        defineTool({
          name: 'sendShortLivedApproved',
          description: 'An approved notice whose record would expire.',
          input: reviewInput,
          idempotency: { keyFields: ['taskId', 'recipientId'], ttl: '200ms' },
          outbound: { preview: (i) => ({ to: i.recipientId, body: i.body }), approval: 'required' },
          execute: () => 'never',
        }),
      ).toThrow(/permanent/);
    });

    it('registry.describe() exports every declaration as JSON', () => {
      const registry = createRegistry([
        sendReviewNotice(new Mailer(), { approval: 'required' }),
        defineTool({
          name: 'addTaskNote',
          description: 'Adds a note to a task',
          input: z.object({ taskId: z.string(), note: z.string() }),
          idempotency: { keyFields: ['taskId'], fingerprintFields: ['taskId', 'note'], ttl: '5m' },
          destructive: false,
          execute: (input) => ({ id: input.taskId }),
        }),
        defineTool({
          name: 'lookupTask',
          description: 'Reads a task.',
          input: z.object({ taskId: z.string() }),
          readOnly: true,
          execute: (input) => ({ id: input.taskId }),
        }),
      ]);
      const described = registry.describe();
      expect(JSON.parse(JSON.stringify(described))).toEqual(described);
      expect(described).toEqual([
        {
          name: 'sendReviewNotice',
          description: 'Sends the review notice of a task version to one recipient.',
          readOnly: false,
          keyFields: ['taskId', 'recipientId', 'templateId', 'entityVersion'],
          fingerprintFields: ['taskId', 'recipientId', 'templateId', 'entityVersion'],
          actionFields: [],
          ttlMs: null,
          approval: 'required',
          approvalTtlMs: 86_400_000,
          outbound: true,
          cost: { credits: 1 },
          destructive: true,
          reconciles: false,
          modelDescription:
            'Sends the review notice of a task version to one recipient. Calling again with the same taskId, recipientId, templateId and entityVersion returns the first result as already_sent; do not retry to repair it. A person approves the exact content first (pending_approval): wait, do not call again with other content. Each action costs 1 credit(s), charged once.',
        },
        {
          name: 'addTaskNote',
          description: 'Adds a note to a task',
          readOnly: false,
          keyFields: ['taskId'],
          fingerprintFields: ['taskId', 'note'],
          actionFields: [],
          ttlMs: 300_000,
          approval: 'none',
          approvalTtlMs: null,
          outbound: false,
          cost: null,
          destructive: false,
          reconciles: false,
          modelDescription:
            'Adds a note to a task. Calling again with the same taskId returns the first result as already_sent; do not retry to repair it. A call with the same taskId but another note is refused (KEY_REUSED). After 5m the same taskId runs again.',
        },
        {
          name: 'lookupTask',
          description: 'Reads a task.',
          readOnly: true,
          keyFields: [],
          fingerprintFields: [],
          actionFields: [],
          ttlMs: null,
          approval: 'none',
          approvalTtlMs: null,
          outbound: false,
          cost: null,
          destructive: false,
          reconciles: false,
          modelDescription:
            'Reads a task. Read-only: it changes nothing and needs no key; call it whenever you need to.',
        },
      ]);
    });
  });
}

describeRuntime('sqlite', async () => {
  // One file holds the engine's records and the agent's tables, each on its own connection.
  const path = join(mkdtempSync(join(tmpdir(), 'oncely-agent-')), 'agent.db');
  const once = await createOncely({ store: sqliteStore({ path }) });
  const db = await openDb(path);
  return {
    once,
    db,
    close: async () => {
      await once.close();
      await db.close();
    },
  };
});

describeRuntime('postgres', async () => {
  const schema = freshSchema();
  const once = await createOncely({ store: postgresStore({ connectionString: POSTGRES_URL, schema }) });
  const db = await openDb(`${POSTGRES_URL}?schema=${schema}`);
  return {
    once,
    db,
    close: async () => {
      await once.close();
      await db.close();
      await dropSchema(schema);
    },
  };
});
