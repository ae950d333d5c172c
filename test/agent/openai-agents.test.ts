/**
 * The OpenAI Agents SDK adapter with the real `@openai/agents`: its Runner driving an Agent whose
 * model is a scripted implementation of the SDK's own `Model` interface (no network), calling
 * tools across turns, in parallel within a turn, with a rephrased body; the SDK's approval
 * interruptions (needsApproval, state.approve / reject) wired to oncely's approvals; budget
 * exhaustion; a read-only tool. On SQLite and PostgreSQL.
 */
import {
  Agent,
  type AgentInputItem,
  type Model,
  type ModelRequest,
  type ModelResponse,
  Runner,
  Usage,
} from '@openai/agents';
import { afterEach, describe, expect, it } from 'vitest';
import type { AnyTool, ToolEnvelope } from '../../src/agent/index.js';
import { rejectApproval, toOpenAiAgentsTools } from '../../src/agent/openai-agents.js';
import { describeTool } from '../../src/agent/registry.js';
import { SELECTED_STORES, type StoreName } from '../support/store-filter.js';
import { type BackendKind, exampleTools, Mailer, notice, openRuntime, TENANT } from './tools.js';

const closers: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const close of closers.splice(0).reverse()) await close();
});

type Call = { name: string; input: unknown };

/** The SDK's Model seam, scripted: each turn answers the next list of tool calls, then text. */
class ScriptedModel implements Model {
  readonly requests: ModelRequest[] = [];
  private turn = 0;
  private ids = 0;
  constructor(private readonly turns: Call[][]) {}

  async getResponse(request: ModelRequest): Promise<ModelResponse> {
    this.requests.push(request);
    const calls = this.turns[this.turn++];
    const output = calls
      ? calls.map((c) => ({
          type: 'function_call' as const,
          callId: `call-${++this.ids}`,
          name: c.name,
          arguments: JSON.stringify(c.input),
          status: 'completed' as const,
        }))
      : [
          {
            type: 'message' as const,
            role: 'assistant' as const,
            status: 'completed' as const,
            content: [{ type: 'output_text' as const, text: 'done' }],
          },
        ];
    return { usage: new Usage(), output };
  }

  // biome-ignore lint/correctness/useYield: the runs here are not streamed.
  async *getStreamedResponse(): AsyncIterable<never> {
    throw new Error('not streamed in these tests');
  }

  /** The tool results the model was given, as envelopes, across every request. */
  envelopesSeen(): ToolEnvelope[] {
    const last = this.requests.at(-1)?.input;
    const items = (Array.isArray(last) ? last : []) as AgentInputItem[];
    return items.flatMap((item) => {
      if (item.type !== 'function_call_result') return [];
      const output = item.output as { type: string; text?: string } | string;
      const text = typeof output === 'string' ? output : (output.text ?? '');
      try {
        return [JSON.parse(text) as ToolEnvelope];
      } catch {
        return [{ message: text } as ToolEnvelope];
      }
    });
  }
}

function describeAdapter(kind: BackendKind) {
  // A store ONCELY_STORES leaves out registers nothing.
  if (!SELECTED_STORES.has(kind as StoreName)) return;
  describe(`OpenAI Agents SDK adapter: ${kind}`, () => {
    async function setUp(options: { approver?: string; tenant?: string; traceId?: string } = {}) {
      const mailer = new Mailer(20);
      const list: AnyTool[] = Object.values(exampleTools(mailer));
      const { runtime, close } = await openRuntime(list, kind);
      closers.push(close);
      const tools = toOpenAiAgentsTools(list, { runtime, ...options });
      const runner = new Runner({ tracingDisabled: true });
      const agentWith = (model: ScriptedModel) =>
        new Agent({ name: 'notifier', instructions: 'Notify.', model, tools });
      return { mailer, runtime, runner, agentWith };
    }

    it('the same call across turns and a rephrased body execute once; the model reads already_sent', async () => {
      const { mailer, runtime, runner, agentWith } = await setUp({ traceId: 'trace-run-1' });
      const model = new ScriptedModel([
        [{ name: 'sendReviewNotice', input: notice() }],
        [{ name: 'sendReviewNotice', input: notice() }],
        [{ name: 'sendReviewNotice', input: notice({ body: 'Kindly review T-1 when you can.' }) }],
        [{ name: 'lookupTask', input: { taskId: 'T-1' } }],
      ]);
      const result = await runner.run(agentWith(model), 'Notify u-42 about task T-1.');
      expect(result.finalOutput).toBe('done');
      const seen = model.envelopesSeen();
      expect(seen.map((e) => e.deliveryState)).toEqual(['sent', 'already_sent', 'already_sent', 'read']);
      const [first, second, rephrased] = seen as [ToolEnvelope, ToolEnvelope, ToolEnvelope];
      expect(second).toMatchObject({ data: first.data, actionId: first.actionId, nextAction: 'continue' });
      expect(rephrased.data).toEqual(first.data);
      // The run's trace id is kept on the record and returned on every call; each call has its own request id.
      expect(seen.map((e) => e.traceId)).toEqual(['trace-run-1', 'trace-run-1', 'trace-run-1', 'trace-run-1']);
      expect(new Set(seen.map((e) => e.requestId)).size).toBe(4);
      expect(mailer.sent.map((m) => m.body)).toEqual(['Please review task T-1.']);
      expect(await runtime.credits.balance(TENANT)).toBe(9);
      // What the model was offered: the declaration's description with the replay rule, and the JSON Schema.
      const offered = model.requests[0]?.tools.find((t) => t.type === 'function' && t.name === 'sendReviewNotice');
      expect(offered).toMatchObject({
        description: describeTool(exampleTools(mailer).sendReviewNotice).modelDescription,
        parameters: { type: 'object', required: ['taskId', 'recipientId', 'templateId', 'entityVersion', 'body'] },
      });
      expect((offered as { description: string }).description).toContain(
        'Calling again with the same taskId, recipientId, templateId and entityVersion returns the first result as already_sent',
      );
    });

    it('a parallel identical pair in one turn executes once', async () => {
      const { mailer, runtime, runner, agentWith } = await setUp();
      const model = new ScriptedModel([
        [
          { name: 'sendReviewNotice', input: notice() },
          { name: 'sendReviewNotice', input: notice() },
        ],
      ]);
      await runner.run(agentWith(model), 'Notify.');
      expect(
        model
          .envelopesSeen()
          .map((e) => e.deliveryState)
          .sort(),
      ).toEqual(['already_sent', 'sent']);
      expect(mailer.sent).toHaveLength(1);
      expect(await runtime.credits.balance(TENANT)).toBe(9);
    });

    it('needsApproval interrupts with the oncely approval pending; state.approve sends the previewed content once', async () => {
      const { mailer, runtime, runner, agentWith } = await setUp({ approver: 'alice' });
      const model = new ScriptedModel([[{ name: 'sendApprovedNotice', input: notice() }]]);
      const agent = agentWith(model);
      const first = await runner.run(agent, 'Notify, with approval.');
      expect(first.interruptions).toHaveLength(1);
      const [pending] = await runtime.approvals('pending');
      expect(pending).toMatchObject({ tool: 'sendApprovedNotice', preview: { to: 'u-42', body: notice().body } });
      expect(mailer.sent).toHaveLength(0);
      first.state.approve(first.interruptions[0] as never);
      const resumed = await runner.run(agent, first.state);
      expect(resumed.finalOutput).toBe('done');
      expect(model.envelopesSeen()).toMatchObject([{ deliveryState: 'sent', approvalId: pending?.id }]);
      expect(await runtime.approval(pending?.id as string)).toMatchObject({ status: 'approved', decidedBy: 'alice' });
      expect(mailer.sent.map((m) => m.body)).toEqual([notice().body]);
      // The model asking again, in a new run, is answered from oncely: no interruption, already_sent.
      const again = new ScriptedModel([[{ name: 'sendApprovedNotice', input: notice() }]]);
      const repeat = await runner.run(agentWith(again), 'Notify again.');
      expect(repeat.interruptions ?? []).toHaveLength(0);
      expect(again.envelopesSeen()).toMatchObject([{ deliveryState: 'already_sent' }]);
      expect(mailer.sent).toHaveLength(1);
    });

    it('rejectApproval records the rejection in oncely and tells the model to stop; nothing is sent', async () => {
      const { mailer, runtime, runner, agentWith } = await setUp({ approver: 'carol' });
      const model = new ScriptedModel([[{ name: 'sendApprovedNotice', input: notice() }]]);
      const agent = agentWith(model);
      const first = await runner.run(agent, 'Notify, with approval.');
      const rejected = await rejectApproval(first.state as never, first.interruptions[0] as never, {
        runtime,
        approver: 'carol',
        reason: 'wrong recipient',
      });
      expect(rejected).toMatchObject({ deliveryState: 'rejected', error: { code: 'REJECTED' } });
      const resumed = await runner.run(agent, first.state);
      expect(resumed.finalOutput).toBe('done');
      expect(model.envelopesSeen()).toMatchObject([{ deliveryState: 'rejected', nextAction: 'stop' }]);
      expect(await runtime.approval(rejected.approvalId as string)).toMatchObject({
        status: 'rejected',
        decidedBy: 'carol',
        reason: 'wrong recipient',
      });
      // A new run asking again is rejected by oncely without an interruption.
      const again = new ScriptedModel([[{ name: 'sendApprovedNotice', input: notice() }]]);
      expect((await runner.run(agentWith(again), 'Again.')).interruptions ?? []).toHaveLength(0);
      expect(again.envelopesSeen()).toMatchObject([{ deliveryState: 'rejected' }]);
      expect(mailer.sent).toHaveLength(0);
    });

    it('budget exhaustion is an envelope the model reads: BUDGET_EXCEEDED, nothing sent', async () => {
      const { mailer, runtime, runner, agentWith } = await setUp({ tenant: 'broke' });
      await runtime.credits.grant('broke', 1);
      const model = new ScriptedModel([
        [{ name: 'sendReviewNotice', input: notice() }],
        [{ name: 'sendReviewNotice', input: notice({ taskId: 'T-2' }) }],
      ]);
      await runner.run(agentWith(model), 'Notify twice.');
      expect(model.envelopesSeen()).toMatchObject([
        { deliveryState: 'sent' },
        { deliveryState: 'failed', success: false, error: { code: 'BUDGET_EXCEEDED' } },
      ]);
      expect(mailer.sent).toHaveLength(1);
      expect(await runtime.credits.balance('broke')).toBe(0);
    });
  });
}

describeAdapter('sqlite');
describeAdapter('postgres');
