/**
 * The MCP adapter with the real SDK: an McpServer and a Client connected in process, the runtime on
 * SQLite and PostgreSQL. Annotations, sent then already_sent, a parallel pair, a client key in `_meta`,
 * approvals, budget exhaustion, and errors as envelopes.
 */
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { InMemoryTransport } from '@modelcontextprotocol/sdk/inMemory.js';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { afterEach, describe, expect, it } from 'vitest';
import type { ToolEnvelope } from '../../src/agent/index.js';
import { type RegisterToolsOptions, registerTools } from '../../src/agent/mcp.js';
import { describeTool } from '../../src/agent/registry.js';
import { SELECTED_STORES, type StoreName } from '../support/store-filter.js';
import { type BackendKind, exampleTools, Mailer, notice, openRuntime, pingTool, TENANT } from './tools.js';

const closers: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const close of closers.splice(0).reverse()) await close();
});

async function setUp(options: { delayMs?: number; tenant?: RegisterToolsOptions['tenant']; kind?: BackendKind } = {}) {
  const mailer = new Mailer(options.delayMs);
  const tools = [...Object.values(exampleTools(mailer)), pingTool];
  const { runtime, close } = await openRuntime(tools, options.kind);
  const server = new McpServer({ name: 'oncely-test', version: '1.0.0' });
  registerTools(server, tools, { runtime, tenant: options.tenant });
  const client = new Client({ name: 'test-client', version: '1.0.0' });
  const [clientSide, serverSide] = InMemoryTransport.createLinkedPair();
  await Promise.all([server.connect(serverSide), client.connect(clientSide)]);
  closers.push(
    close,
    () => server.close(),
    () => client.close(),
  );
  const call = async (name: string, args: Record<string, unknown>, meta?: Record<string, unknown>) => {
    const result = await client.callTool({ name, arguments: args, ...(meta ? { _meta: meta } : {}) });
    const envelope = result.structuredContent as unknown as ToolEnvelope;
    const [text] = result.content as { type: string; text: string }[];
    expect(JSON.parse(text?.text ?? 'null')).toEqual(envelope);
    return { envelope, isError: result.isError };
  };
  return { mailer, runtime, client, call, tools };
}

function describeAdapter(kind: BackendKind) {
  // A store ONCELY_STORES leaves out registers nothing.
  if (!SELECTED_STORES.has(kind as StoreName)) return;
  describe(`MCP adapter: ${kind}`, () => {
    it('lists every tool with honest annotations, its JSON Schema and the envelope as output schema', async () => {
      const { client, tools: runtimeTools } = await setUp({ kind });
      const { tools } = await client.listTools();
      const byName = Object.fromEntries(tools.map((t) => [t.name, t]));
      expect(Object.keys(byName).sort()).toEqual([
        'addNote',
        'lookupTask',
        'ping',
        'sendApprovedNotice',
        'sendReviewNotice',
      ]);
      expect(byName.sendReviewNotice?.annotations).toEqual({
        readOnlyHint: false,
        destructiveHint: true,
        idempotentHint: true,
        openWorldHint: true,
      });
      expect(byName.addNote?.annotations).toEqual({
        readOnlyHint: false,
        destructiveHint: false,
        idempotentHint: true,
      });
      expect(byName.lookupTask?.annotations).toEqual({
        readOnlyHint: true,
        destructiveHint: false,
        idempotentHint: true,
      });
      // The description is the declaration's: the key fields and the replay rule reach the model.
      const described = Object.fromEntries(runtimeTools.map((t) => [t.name, describeTool(t).modelDescription]));
      expect(byName.sendReviewNotice?.description).toBe(described.sendReviewNotice);
      expect(byName.sendReviewNotice?.description).toContain(
        'Sends a review notice to the recipient of a task. Calling again with the same taskId, recipientId, templateId and entityVersion returns the first result as already_sent; do not retry to repair it.',
      );
      expect(byName.lookupTask?.description).toMatch(/Read-only: it changes nothing and needs no key/);
      const input = byName.sendReviewNotice?.inputSchema;
      expect(input?.type).toBe('object');
      expect(input?.required).toEqual(['taskId', 'recipientId', 'templateId', 'entityVersion', 'body']);
      expect(input?.properties).toMatchObject({
        entityVersion: { type: 'number' },
        body: { type: 'string', description: 'The text of the notice' },
      });
      expect(byName.addNote?.inputSchema.required).toEqual(['text']);
      expect(byName.addNote?.outputSchema?.required).toEqual(
        expect.arrayContaining(['success', 'deliveryState', 'nextAction', 'idempotencyKey']),
      );
    });

    it('answers sent, then already_sent with the first result, executing and charging once', async () => {
      const { call, mailer, runtime } = await setUp({ kind });
      const first = await call('sendReviewNotice', notice());
      expect(first.isError).toBe(false);
      expect(first.envelope).toMatchObject({
        success: true,
        deliveryState: 'sent',
        nextAction: 'continue',
        idempotencyKey: 'sendReviewNotice:T-1:u-42:review:3',
        data: { messageId: 'msg-1' },
      });
      const again = await call('sendReviewNotice', notice());
      expect(again.isError).toBe(false);
      expect(again.envelope).toMatchObject({
        success: true,
        deliveryState: 'already_sent',
        nextAction: 'continue',
        data: { messageId: 'msg-1' },
        actionId: first.envelope.actionId,
        firstExecutedAt: first.envelope.firstExecutedAt,
      });
      // The model rephrased the body of the same intent: the first result, nothing sent.
      const rephrased = await call('sendReviewNotice', notice({ body: 'Kindly review T-1, thanks!' }));
      expect(rephrased.envelope.deliveryState).toBe('already_sent');
      expect(mailer.sent).toHaveLength(1);
      expect(await runtime.credits.balance(TENANT)).toBe(9);
    });

    it('runs a read-only tool on every call: read, no key, no record', async () => {
      const { call, mailer, runtime } = await setUp({ kind });
      const first = await call('lookupTask', { taskId: 'T-1' }, { 'oncely/traceId': 'trace-read' });
      const second = await call('lookupTask', { taskId: 'T-1' });
      expect(first).toMatchObject({
        isError: false,
        envelope: { deliveryState: 'read', idempotencyKey: null, traceId: 'trace-read', data: { lookups: 1 } },
      });
      expect(second.envelope).toMatchObject({ deliveryState: 'read', data: { lookups: 2 } });
      expect(mailer.lookups).toBe(2);
      expect(await runtime.credits.balance(TENANT)).toBe(10);
    });

    it('answers budget exhaustion as an error envelope: BUDGET_EXCEEDED, nothing sent', async () => {
      const { call, mailer, runtime } = await setUp({ kind, tenant: 'broke' });
      await runtime.credits.grant('broke', 1);
      expect((await call('sendReviewNotice', notice())).envelope.deliveryState).toBe('sent');
      const short = await call('sendReviewNotice', notice({ taskId: 'T-2' }));
      expect(short).toMatchObject({
        isError: true,
        envelope: { deliveryState: 'failed', success: false, nextAction: 'stop', error: { code: 'BUDGET_EXCEEDED' } },
      });
      expect(mailer.sent).toHaveLength(1);
      expect(await runtime.credits.balance('broke')).toBe(0);
    });

    it('executes a parallel identical pair once', async () => {
      const { call, mailer } = await setUp({ kind, delayMs: 100 });
      const pair = await Promise.all([call('sendReviewNotice', notice()), call('sendReviewNotice', notice())]);
      expect(pair.map((r) => r.envelope.deliveryState).sort()).toEqual(['already_sent', 'sent']);
      expect(pair.every((r) => r.envelope.success && r.envelope.data !== null)).toBe(true);
      expect(mailer.sent).toHaveLength(1);
    });

    it("uses the client's key from _meta instead of the key fields", async () => {
      const { call, mailer } = await setUp({ kind });
      const meta = { 'oncely/idempotencyKey': 'client-key-1' };
      const first = await call('sendReviewNotice', notice(), meta);
      expect(first.envelope).toMatchObject({ deliveryState: 'sent', idempotencyKey: 'sendReviewNotice:client-key-1' });
      const second = await call('sendReviewNotice', notice({ body: 'Another wording' }), meta);
      expect(second.envelope).toMatchObject({
        deliveryState: 'already_sent',
        idempotencyKey: 'sendReviewNotice:client-key-1',
      });
      // The un-namespaced field works too; another client key is another intent, even with the same fields.
      const other = await call('sendReviewNotice', notice(), { idempotencyKey: 'client-key-2' });
      expect(other.envelope).toMatchObject({ deliveryState: 'sent', idempotencyKey: 'sendReviewNotice:client-key-2' });
      expect(mailer.sent.map((s) => s.idempotencyKey)).toEqual([
        'sendReviewNotice:client-key-1',
        'sendReviewNotice:client-key-2',
      ]);
    });

    it('refuses two different _meta keys and a key that is not text, as envelopes', async () => {
      const { call, mailer } = await setUp({ kind });
      const both = await call('sendReviewNotice', notice(), { 'oncely/idempotencyKey': 'a', idempotencyKey: 'b' });
      expect(both.isError).toBe(true);
      expect(both.envelope).toMatchObject({ success: false, deliveryState: 'failed', error: { code: 'KEY_INVALID' } });
      const numeric = await call('sendReviewNotice', notice(), { idempotencyKey: 42 });
      expect(numeric.envelope.error?.code).toBe('KEY_INVALID');
      const blank = await call('sendReviewNotice', notice(), { idempotencyKey: '   ' });
      expect(blank.envelope.error?.code).toBe('KEY_INVALID');
      expect(mailer.sent).toHaveLength(0);
    });

    it('answers pending_approval without sending; after runtime.approve the next call is already_sent', async () => {
      const { call, mailer, runtime } = await setUp({ kind });
      const pending = await call('sendApprovedNotice', notice());
      expect(pending.isError).toBe(false);
      expect(pending.envelope).toMatchObject({ success: false, deliveryState: 'pending_approval', nextAction: 'wait' });
      const approvalId = pending.envelope.approvalId as string;
      expect(approvalId).toBe(pending.envelope.actionId);
      expect(mailer.sent).toHaveLength(0);
      // The model asks again while it waits: still pending, nothing sent.
      expect((await call('sendApprovedNotice', notice())).envelope.deliveryState).toBe('pending_approval');

      const approved = await runtime.approve(approvalId, { approver: 'alice@example.com' });
      expect(approved.deliveryState).toBe('sent');
      const after = await call('sendApprovedNotice', notice());
      expect(after.isError).toBe(false);
      expect(after.envelope).toMatchObject({ success: true, deliveryState: 'already_sent', approvalId });
      expect(mailer.sent).toEqual([
        { to: 'u-42', body: 'Please review task T-1.', idempotencyKey: 'sendApprovedNotice:T-1:u-42:review:3' },
      ]);
      expect(await runtime.approval(approvalId)).toMatchObject({ status: 'approved', decidedBy: 'alice@example.com' });
    });

    it('answers a rejected approval as an error that tells the model to stop', async () => {
      const { call, mailer, runtime } = await setUp({ kind });
      const pending = await call('sendApprovedNotice', notice());
      await runtime.reject(pending.envelope.approvalId as string, { approver: 'bob', reason: 'wrong recipient' });
      const after = await call('sendApprovedNotice', notice());
      expect(after.isError).toBe(true);
      expect(after.envelope).toMatchObject({
        deliveryState: 'rejected',
        nextAction: 'stop',
        error: { code: 'REJECTED' },
      });
      expect(mailer.sent).toHaveLength(0);
    });

    it('answers a bad input and a missing key field with envelopes the model can act on', async () => {
      const { call, mailer } = await setUp({ kind });
      const { taskId: _, ...withoutTaskId } = notice();
      const invalid = await call('sendReviewNotice', withoutTaskId);
      expect(invalid.isError).toBe(true);
      expect(invalid.envelope).toMatchObject({
        success: false,
        deliveryState: 'failed',
        error: { code: 'INPUT_INVALID' },
      });
      expect(invalid.envelope.message).toContain('taskId');

      const keyless = await call('addNote', { text: 'remember the milk' });
      expect(keyless.isError).toBe(true);
      expect(keyless.envelope).toMatchObject({ success: false, error: { code: 'KEY_REQUIRED' } });
      expect(keyless.envelope.message).toContain('noteId');
      // A client key stands in for the missing key field.
      const keyed = await call('addNote', { text: 'remember the milk' }, { idempotencyKey: 'note-1' });
      expect(keyed.envelope).toMatchObject({ deliveryState: 'sent', data: { noted: 'remember the milk' } });
      expect(mailer.sent).toHaveLength(0);
    });

    it('advertises another Standard Schema without JSON Schema as an open object, and oncely validates it', async () => {
      const { client, call } = await setUp({ kind });
      const { tools } = await client.listTools();
      expect(tools.find((t) => t.name === 'ping')?.inputSchema).toMatchObject({ type: 'object' });
      expect((await call('ping', { ref: 'r-1' })).envelope).toMatchObject({
        deliveryState: 'sent',
        data: { pong: 'r-1' },
      });
      expect((await call('ping', { ref: 'r-1' })).envelope.deliveryState).toBe('already_sent');
      const bad = await call('ping', { ref: 7 });
      expect(bad.envelope).toMatchObject({ error: { code: 'INPUT_INVALID' } });
      expect(bad.envelope.message).toContain('ref must be a string');
    });

    it('takes the tenant from the request: each tenant is its own scope', async () => {
      const seen: unknown[] = [];
      let tenant = 'beta';
      const { call } = await setUp({
        kind,
        tenant: (extra) => {
          seen.push(extra.requestId);
          return tenant;
        },
      });
      const beta = await call('addNote', { noteId: 'n-1', text: 'hello' });
      expect(beta.envelope.deliveryState).toBe('sent');
      tenant = 'gamma';
      const gamma = await call('addNote', { noteId: 'n-1', text: 'hello' });
      expect(gamma.envelope.deliveryState).toBe('sent');
      expect(gamma.envelope.actionId).not.toBe(beta.envelope.actionId);
      tenant = 'beta';
      expect((await call('addNote', { noteId: 'n-1', text: 'hello' })).envelope.deliveryState).toBe('already_sent');
      expect(seen).toHaveLength(3);
    });
  });
}

describeAdapter('sqlite');
describeAdapter('postgres');
