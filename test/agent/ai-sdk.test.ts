/**
 * The AI SDK adapter with the real `ai` package: generateText driven by the SDK's MockLanguageModelV3,
 * scripted to call tools (the same call across steps, a parallel pair, a rephrased body), and the
 * SDK's tool approval flow (needsApproval, tool-approval-request, tool-approval-response) wired to
 * oncely's approvals; budget exhaustion. The runtime runs on SQLite and PostgreSQL.
 */
import { generateText, type ModelMessage, stepCountIs, type ToolSet } from 'ai';
import { MockLanguageModelV3 } from 'ai/test';
import { afterEach, describe, expect, it } from 'vitest';
import { type AiSdkToolsOptions, rejectDeniedApprovals, toAiSdkTools } from '../../src/agent/ai-sdk.js';
import type { AgentRuntime, AnyTool, ToolEnvelope } from '../../src/agent/index.js';
import { describeTool } from '../../src/agent/registry.js';
import { SELECTED_STORES, type StoreName } from '../support/store-filter.js';
import { type BackendKind, exampleTools, Mailer, notice, openRuntime, pingTool, TENANT } from './tools.js';

const closers: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const close of closers.splice(0).reverse()) await close();
});

type Call = { toolName: string; input: unknown };

/** A model that answers each step with the next scripted tool calls, then with text. */
function scriptedModel(steps: Call[][]) {
  let step = 0;
  let ids = 0;
  return new MockLanguageModelV3({
    doGenerate: async () => {
      const calls = steps[step++];
      const usage = {
        inputTokens: { total: 10, noCache: 10, cacheRead: undefined, cacheWrite: undefined },
        outputTokens: { total: 5, text: 5, reasoning: undefined },
      };
      if (!calls)
        return {
          content: [{ type: 'text', text: 'done' }],
          finishReason: { unified: 'stop', raw: 'stop' },
          usage,
          warnings: [],
        };
      return {
        content: calls.map((c) => ({
          type: 'tool-call' as const,
          toolCallId: `call-${++ids}`,
          toolName: c.toolName,
          input: JSON.stringify(c.input),
        })),
        finishReason: { unified: 'tool-calls', raw: 'tool_calls' },
        usage,
        warnings: [],
      };
    },
  });
}

async function setUp(options: Partial<AiSdkToolsOptions> & { delayMs?: number; kind?: BackendKind } = {}) {
  const mailer = new Mailer(options.delayMs);
  const declared = exampleTools(mailer);
  const list: AnyTool[] = [...Object.values(declared), pingTool];
  const { runtime, close } = await openRuntime(list, options.kind);
  closers.push(close);
  const tools = (over: Partial<AiSdkToolsOptions> = {}): ToolSet =>
    toAiSdkTools(list, { runtime, approver: options.approver, ...over });
  return { mailer, runtime, list, tools };
}

/** The envelopes of a result's tool results, step by step. */
function envelopes(result: { steps: { toolResults: { output: unknown }[] }[] }): ToolEnvelope[][] {
  return result.steps.map((s) => s.toolResults.map((r) => r.output as ToolEnvelope));
}

/** The tool results the SDK wrote into the messages (approved calls it executed before the first step). */
function toolResultsIn(messages: ModelMessage[]): ToolEnvelope[] {
  return messages.flatMap((m) =>
    m.role === 'tool'
      ? m.content.flatMap((p) =>
          p.type === 'tool-result' && p.output.type === 'json' ? [p.output.value as unknown as ToolEnvelope] : [],
        )
      : [],
  );
}

function describeAdapter(kind: BackendKind) {
  // A store ONCELY_STORES leaves out registers nothing.
  if (!SELECTED_STORES.has(kind as StoreName)) return;
  describe(`AI SDK adapter: ${kind}`, () => {
    it("the run's trace id on every envelope, the declaration's description, and read-only calls that always run", async () => {
      const { mailer, tools, list } = await setUp({ kind });
      const model = scriptedModel([
        [{ toolName: 'sendReviewNotice', input: notice() }],
        [{ toolName: 'sendReviewNotice', input: notice() }],
        [
          { toolName: 'lookupTask', input: { taskId: 'T-1' } },
          { toolName: 'lookupTask', input: { taskId: 'T-1' } },
        ],
      ]);
      const result = await generateText({
        model,
        tools: tools({ traceId: 'trace-ai-run' }),
        prompt: 'Notify.',
        stopWhen: stepCountIs(5),
      });
      const seen = envelopes(result).flat();
      expect(seen.map((e) => e.deliveryState)).toEqual(['sent', 'already_sent', 'read', 'read']);
      expect(seen.map((e) => e.traceId)).toEqual(Array(4).fill('trace-ai-run'));
      expect(new Set(seen.map((e) => e.requestId)).size).toBe(4);
      expect(mailer.lookups).toBe(2);
      const offered = model.doGenerateCalls[0]?.tools?.find((t) => t.name === 'sendReviewNotice');
      const declared = list.find((t) => t.name === 'sendReviewNotice') as AnyTool;
      expect(offered).toMatchObject({ description: describeTool(declared).modelDescription });
      expect((offered as { description: string }).description).toMatch(
        /Calling again with the same taskId, recipientId, templateId and entityVersion returns the first result as already_sent; do not retry to repair it/,
      );
    });

    it('executes the same call across steps once; the model sees already_sent, also for a rephrased body', async () => {
      const { mailer, runtime, tools } = await setUp({ kind });
      const model = scriptedModel([
        [{ toolName: 'sendReviewNotice', input: notice() }],
        [{ toolName: 'sendReviewNotice', input: notice() }],
        [{ toolName: 'sendReviewNotice', input: notice({ body: 'Kindly review T-1 when you can.' }) }],
      ]);
      const result = await generateText({
        model,
        tools: tools(),
        prompt: 'Notify u-42 about task T-1.',
        stopWhen: stepCountIs(6),
      });
      expect(result.text).toBe('done');
      const states = envelopes(result).map((step) => step.map((e) => e.deliveryState));
      expect(states).toEqual([['sent'], ['already_sent'], ['already_sent'], []]);
      const [[first], [second]] = envelopes(result) as [[ToolEnvelope], [ToolEnvelope]];
      expect(second).toMatchObject({
        success: true,
        nextAction: 'continue',
        data: first.data,
        actionId: first.actionId,
        idempotencyKey: 'sendReviewNotice:T-1:u-42:review:3',
      });
      expect(mailer.sent).toEqual([
        { to: 'u-42', body: 'Please review task T-1.', idempotencyKey: 'sendReviewNotice:T-1:u-42:review:3' },
      ]);
      expect(await runtime.credits.balance(TENANT)).toBe(9);

      // What the model was shown: the tool's JSON Schema, and the envelope as the tool result.
      const offered = model.doGenerateCalls[0]?.tools?.find((t) => t.name === 'sendReviewNotice');
      expect(offered).toMatchObject({
        type: 'function',
        inputSchema: { type: 'object', required: ['taskId', 'recipientId', 'templateId', 'entityVersion', 'body'] },
      });
      const seen = model.doGenerateCalls[2]?.prompt.flatMap((m) => (m.role === 'tool' ? m.content : []));
      expect(seen?.at(-1)).toMatchObject({
        type: 'tool-result',
        output: { type: 'json', value: { deliveryState: 'already_sent', nextAction: 'continue' } },
      });
    });

    it('executes a parallel identical pair in one step once', async () => {
      const { mailer, tools } = await setUp({ kind, delayMs: 100 });
      const result = await generateText({
        model: scriptedModel([
          [
            { toolName: 'sendReviewNotice', input: notice() },
            { toolName: 'sendReviewNotice', input: notice() },
          ],
        ]),
        tools: tools(),
        prompt: 'Notify u-42 about task T-1.',
        stopWhen: stepCountIs(3),
      });
      expect(
        envelopes(result)[0]
          ?.map((e) => e.deliveryState)
          .sort(),
      ).toEqual(['already_sent', 'sent']);
      expect(mailer.sent).toHaveLength(1);
    });

    it('budget exhaustion is an envelope the model reads: BUDGET_EXCEEDED, nothing sent', async () => {
      const { mailer, runtime, tools } = await setUp({ kind });
      await runtime.credits.grant('broke', 1);
      const result = await generateText({
        model: scriptedModel([
          [{ toolName: 'sendReviewNotice', input: notice() }],
          [{ toolName: 'sendReviewNotice', input: notice({ taskId: 'T-2' }) }],
        ]),
        tools: tools({ tenant: 'broke' }),
        prompt: 'Notify twice.',
        stopWhen: stepCountIs(4),
      });
      expect(envelopes(result).flat()).toMatchObject([
        { deliveryState: 'sent' },
        { deliveryState: 'failed', success: false, nextAction: 'stop', error: { code: 'BUDGET_EXCEEDED' } },
      ]);
      expect(mailer.sent).toHaveLength(1);
      expect(await runtime.credits.balance('broke')).toBe(0);
      expect(await runtime.credits.balance(TENANT)).toBe(10);
    });

    it('answers a bad input and a missing key field with envelopes', async () => {
      const { mailer, tools } = await setUp({ kind });
      const { taskId: _, ...withoutTaskId } = notice();
      const result = await generateText({
        model: scriptedModel([
          [
            { toolName: 'sendReviewNotice', input: withoutTaskId },
            { toolName: 'addNote', input: { text: 'remember the milk' } },
          ],
        ]),
        tools: tools(),
        prompt: 'Go.',
        stopWhen: stepCountIs(2),
      });
      const [invalid, keyless] = envelopes(result)[0] ?? [];
      expect(invalid).toMatchObject({ success: false, deliveryState: 'failed', error: { code: 'INPUT_INVALID' } });
      expect(keyless).toMatchObject({ success: false, error: { code: 'KEY_REQUIRED' } });
      expect(keyless?.message).toContain('noteId');
      expect(mailer.sent).toHaveLength(0);
    });

    it('offers another Standard Schema without JSON Schema as an open object; oncely validates it', async () => {
      const { tools } = await setUp({ kind });
      const model = scriptedModel([
        [
          { toolName: 'ping', input: { ref: 'r-1' } },
          { toolName: 'ping', input: { ref: 7 } },
        ],
      ]);
      const result = await generateText({ model, tools: tools(), prompt: 'Ping.', stopWhen: stepCountIs(2) });
      expect(model.doGenerateCalls[0]?.tools?.find((t) => t.name === 'ping')).toMatchObject({
        inputSchema: { type: 'object' },
      });
      const [ok, bad] = envelopes(result)[0] ?? [];
      expect(ok).toMatchObject({ deliveryState: 'sent', data: { pong: 'r-1' } });
      expect(bad).toMatchObject({ error: { code: 'INPUT_INVALID' } });
    });

    describe('approvals through the SDK', () => {
      /** Runs a turn where the model calls sendApprovedNotice; returns the messages so far and the SDK's approval id. */
      async function requestApproval(tools: ToolSet, input = notice()) {
        const prompt: ModelMessage[] = [{ role: 'user', content: 'Notify u-42 about task T-1.' }];
        const result = await generateText({
          model: scriptedModel([[{ toolName: 'sendApprovedNotice', input }]]),
          tools,
          messages: prompt,
          stopWhen: stepCountIs(3),
        });
        const requests = result.content.filter((p) => p.type === 'tool-approval-request');
        expect(requests).toHaveLength(1);
        expect(requests[0]?.toolCall).toMatchObject({ toolName: 'sendApprovedNotice', input });
        return { messages: [...prompt, ...result.response.messages], approvalId: requests[0]?.approvalId as string };
      }

      /** The app's answer to an approval request, as the next tool message. */
      const answer = (approvalId: string, approved: boolean, reason?: string): ModelMessage => ({
        role: 'tool',
        content: [{ type: 'tool-approval-response', approvalId, approved, ...(reason ? { reason } : {}) }],
      });

      it('an approval response executes through oncely: approver recorded, the exact content sent once', async () => {
        const { mailer, runtime, tools } = await setUp({ kind });
        // The approver comes from the call's context: the person whose request carries the approval.
        const set = tools({ approver: (a) => (a.context as { user?: string } | undefined)?.user });
        const { messages, approvalId } = await requestApproval(set);
        expect(mailer.sent).toHaveLength(0);

        const next = [...messages, answer(approvalId, true, 'looks right')];
        const model = scriptedModel([]);
        const result = await generateText({
          model,
          tools: set,
          messages: next,
          experimental_context: { user: 'alice@example.com' },
          stopWhen: stepCountIs(3),
        });
        const [sent] = toolResultsIn(result.response.messages);
        expect(sent).toMatchObject({ success: true, deliveryState: 'sent', nextAction: 'continue' });
        expect(mailer.sent).toEqual([
          { to: 'u-42', body: 'Please review task T-1.', idempotencyKey: 'sendApprovedNotice:T-1:u-42:review:3' },
        ]);
        const approval = await runtime.approval(sent?.approvalId as string);
        expect(approval).toMatchObject({
          status: 'approved',
          decidedBy: 'alice@example.com',
          tool: 'sendApprovedNotice',
          preview: { to: 'u-42', body: 'Please review task T-1.' },
        });
        expect(approval?.decidedAt).toBeTypeOf('number');
        // The model's next step saw the envelope.
        const seen = model.doGenerateCalls[0]?.prompt.flatMap((m) => (m.role === 'tool' ? m.content : []));
        expect(seen?.at(-1)).toMatchObject({
          type: 'tool-result',
          output: { type: 'json', value: { deliveryState: 'sent' } },
        });

        // The same approval response sent again (a retried request): nothing sent again.
        const retried = await generateText({
          model: scriptedModel([]),
          tools: set,
          messages: next,
          experimental_context: { user: 'alice@example.com' },
        });
        expect(toolResultsIn(retried.response.messages)[0]?.deliveryState).toBe('already_sent');

        // The model asks for the same intent again and someone approves it again: already_sent.
        const again = await requestApproval(tools({ approver: 'bob@example.com' }));
        const replay = await generateText({
          model: scriptedModel([]),
          tools: tools({ approver: 'bob@example.com' }),
          messages: [...again.messages, answer(again.approvalId, true)],
        });
        expect(toolResultsIn(replay.response.messages)[0]).toMatchObject({
          success: true,
          deliveryState: 'already_sent',
          approvalId: sent?.approvalId,
        });
        expect(mailer.sent).toHaveLength(1);
        expect(await runtime.approval(sent?.approvalId as string)).toMatchObject({ decidedBy: 'alice@example.com' });
      });

      it('a denial is recorded by rejectDeniedApprovals; the intent is rejected from then on', async () => {
        const { mailer, runtime, list, tools } = await setUp({ kind, approver: 'bob@example.com' });
        const set = tools();
        const { messages, approvalId } = await requestApproval(set);
        const next = [...messages, answer(approvalId, false, 'wrong recipient')];

        const [rejected] = await rejectDeniedApprovals(next, list, { runtime, approver: 'bob@example.com' });
        expect(rejected).toMatchObject({ deliveryState: 'rejected', nextAction: 'stop', error: { code: 'REJECTED' } });
        expect(await runtime.approval(rejected?.approvalId as string)).toMatchObject({
          status: 'rejected',
          decidedBy: 'bob@example.com',
          reason: 'wrong recipient',
        });
        // The SDK answers the model itself, without calling execute.
        const result = await generateText({ model: scriptedModel([]), tools: set, messages: next });
        const denied = result.response.messages.flatMap((m) => (m.role === 'tool' ? m.content : []));
        expect(denied[0]).toMatchObject({
          type: 'tool-result',
          output: { type: 'execution-denied', reason: 'wrong recipient' },
        });

        // Approving the same intent later cannot send it.
        const again = await requestApproval(set);
        const late = await generateText({
          model: scriptedModel([]),
          tools: set,
          messages: [...again.messages, answer(again.approvalId, true)],
        });
        expect(toolResultsIn(late.response.messages)[0]).toMatchObject({ deliveryState: 'rejected', success: false });
        expect(mailer.sent).toHaveLength(0);
      });

      it('without an approver nothing is approved or sent: pending_approval with APPROVER_REQUIRED', async () => {
        const { mailer, runtime, tools } = await setUp({ kind });
        const set = tools();
        const { messages, approvalId } = await requestApproval(set);
        const result = await generateText({
          model: scriptedModel([]),
          tools: set,
          messages: [...messages, answer(approvalId, true)],
        });
        const [envelope] = toolResultsIn(result.response.messages);
        expect(envelope).toMatchObject({
          deliveryState: 'pending_approval',
          nextAction: 'wait',
          error: { code: 'APPROVER_REQUIRED' },
        });
        expect(await runtime.approval(envelope?.approvalId as string)).toMatchObject({ status: 'pending' });
        expect(mailer.sent).toHaveLength(0);
      });

      it('an approval granted in oncely directly is honoured when the SDK approval arrives', async () => {
        const { mailer, runtime, tools } = await setUp({ kind, approver: 'bob@example.com' });
        const set = tools();
        const { messages, approvalId } = await requestApproval(set);
        await approveInOncely(runtime, 'carol@example.com');
        const result = await generateText({
          model: scriptedModel([]),
          tools: set,
          messages: [...messages, answer(approvalId, true)],
        });
        expect(toolResultsIn(result.response.messages)[0]?.deliveryState).toBe('already_sent');
        expect(mailer.sent).toHaveLength(1);
      });
    });
  });
}

describeAdapter('sqlite');
describeAdapter('postgres');

/** Creates the oncely approval of the default notice the way another channel would, and approves it. */
async function approveInOncely(runtime: AgentRuntime, approver: string) {
  const pending = await runtime.call('sendApprovedNotice', notice());
  expect(pending.deliveryState).toBe('pending_approval');
  const sent = await runtime.approve(pending.approvalId as string, { approver });
  expect(sent.deliveryState).toBe('sent');
}
