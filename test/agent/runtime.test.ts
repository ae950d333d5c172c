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
    idempotency: {
      required: true,
      keyFields: ['taskId', 'recipientId', 'templateId', 'entityVersion'],
      ttl: 'permanent',
    },
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

    // The reservation is tied to the record's life (its trace id): after expiry the intent is new and charged anew.
    it('a finite TTL: once the record expired, the new execution is charged again', async () => {
      const mailer = new Mailer();
      const short = defineTool({
        name: 'sendShortLived',
        description: 'A notice whose record answers duplicates for 200ms only.',
        input: reviewInput,
        idempotency: { keyFields: ['taskId', 'recipientId'], ttl: '200ms' },
        cost: { credits: 1, account: (ctx) => ctx.tenant },
        execute: (input, ctx) => mailer.send(input.recipientId, input.body, ctx),
      });
      const { agent, tenant } = await runtime([short]);
      expect((await agent.call('sendShortLived', notice())).deliveryState).toBe('sent');
      expect((await agent.call('sendShortLived', notice())).deliveryState).toBe('already_sent');
      await sleep(300);
      expect((await agent.call('sendShortLived', notice())).deliveryState).toBe('sent');
      expect(mailer.sent).toHaveLength(2);
      // Two e-mails went out: two credits.
      expect(await agent.credits.balance(tenant)).toBe(8);
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
          name: 'lookupTask',
          description: 'Reads a task.',
          input: z.object({ taskId: z.string(), note: z.string() }),
          idempotency: { keyFields: ['taskId'], fingerprintFields: ['taskId', 'note'], ttl: '5m' },
          execute: (input) => ({ id: input.taskId }),
        }),
      ]);
      const described = registry.describe();
      expect(JSON.parse(JSON.stringify(described))).toEqual(described);
      expect(described).toEqual([
        {
          name: 'sendReviewNotice',
          description: 'Sends the review notice of a task version to one recipient.',
          keyFields: ['taskId', 'recipientId', 'templateId', 'entityVersion'],
          fingerprintFields: ['taskId', 'recipientId', 'templateId', 'entityVersion'],
          ttlMs: null,
          approval: 'required',
          cost: { credits: 1 },
          destructive: true,
        },
        {
          name: 'lookupTask',
          description: 'Reads a task.',
          keyFields: ['taskId'],
          fingerprintFields: ['taskId', 'note'],
          ttlMs: 300_000,
          approval: 'none',
          cost: null,
          destructive: false,
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
