/**
 * The LangChain adapter with the real packages: a LangGraph graph (model node, the prebuilt
 * ToolNode, a MemorySaver checkpointer) whose model is LangChain's own FakeStreamingChatModel, one
 * scripted per turn, emitting tool calls (no network): the same call across turns, a parallel
 * pair in one turn, a rephrased body, approval through LangGraph's interrupt and Command resume
 * (approve and reject), budget exhaustion, a read-only tool, the thread id as trace id. On SQLite
 * and PostgreSQL.
 */
import { AIMessageChunk, type BaseMessage, ToolMessage } from '@langchain/core/messages';
import { convertToOpenAITool } from '@langchain/core/utils/function_calling';
import { FakeStreamingChatModel } from '@langchain/core/utils/testing';
import { Command, END, interrupt, MemorySaver, MessagesAnnotation, START, StateGraph } from '@langchain/langgraph';
import { ToolNode, toolsCondition } from '@langchain/langgraph/prebuilt';
import { afterEach, describe, expect, it } from 'vitest';
import type { AnyTool, ToolEnvelope } from '../../src/agent/index.js';
import { type LangChainToolsOptions, toLangChainTools } from '../../src/agent/langchain.js';
import { describeTool } from '../../src/agent/registry.js';
import { SELECTED_STORES, type StoreName } from '../support/store-filter.js';
import { type BackendKind, exampleTools, Mailer, notice, openRuntime, TENANT } from './tools.js';

const closers: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const close of closers.splice(0).reverse()) await close();
});

type Call = { name: string; input: Record<string, unknown> };
let ids = 0;

/** A graph whose model answers turn i with LangChain's fake model scripted with turn i's tool calls. */
function graphOf(turns: Call[][], tools: ReturnType<typeof toLangChainTools>) {
  let turn = 0;
  const agent = async (state: typeof MessagesAnnotation.State) => {
    const calls = turns[turn++];
    const model = new FakeStreamingChatModel({
      sleep: 0,
      chunks: [
        new AIMessageChunk({
          content: calls ? '' : 'done',
          tool_calls: (calls ?? []).map((c) => ({
            id: `call-${++ids}`,
            name: c.name,
            args: c.input,
            type: 'tool_call',
          })),
        }),
      ],
    });
    return { messages: [await model.bindTools(tools).invoke(state.messages)] };
  };
  return new StateGraph(MessagesAnnotation)
    .addNode('agent', agent)
    .addNode('tools', new ToolNode(tools))
    .addEdge(START, 'agent')
    .addConditionalEdges('agent', toolsCondition, ['tools', END])
    .addEdge('tools', 'agent')
    .compile({ checkpointer: new MemorySaver() });
}

/** The envelopes the tools answered, in order. */
function envelopes(messages: BaseMessage[]): ToolEnvelope[] {
  return messages
    .filter((m): m is ToolMessage => ToolMessage.isInstance(m))
    .map((m) => JSON.parse(String(m.content)) as ToolEnvelope);
}

function describeAdapter(kind: BackendKind) {
  // A store ONCELY_STORES leaves out registers nothing.
  if (!SELECTED_STORES.has(kind as StoreName)) return;
  describe(`LangChain / LangGraph adapter: ${kind}`, () => {
    async function setUp(options: Partial<LangChainToolsOptions> = {}) {
      const mailer = new Mailer(20);
      const list: AnyTool[] = Object.values(exampleTools(mailer));
      const { runtime, close } = await openRuntime(list, kind);
      closers.push(close);
      const tools = toLangChainTools(list, {
        runtime,
        traceId: (config) => config.configurable?.thread_id,
        interrupt,
        ...options,
      });
      return { mailer, runtime, tools, list };
    }
    const thread = (id: string) => ({ configurable: { thread_id: id } });

    it('the same call across turns and a rephrased body execute once; the model reads already_sent', async () => {
      const { mailer, runtime, tools, list } = await setUp();
      const graph = graphOf(
        [
          [{ name: 'sendReviewNotice', input: notice() }],
          [{ name: 'sendReviewNotice', input: notice() }],
          [{ name: 'sendReviewNotice', input: notice({ body: 'Kindly review T-1 when you can.' }) }],
          [{ name: 'lookupTask', input: { taskId: 'T-1' } }],
        ],
        tools,
      );
      const result = await graph.invoke({ messages: [{ role: 'user', content: 'Notify u-42.' }] }, thread('thread-1'));
      const seen = envelopes(result.messages);
      expect(seen.map((e) => e.deliveryState)).toEqual(['sent', 'already_sent', 'already_sent', 'read']);
      expect(seen[1]).toMatchObject({ data: seen[0]?.data, actionId: seen[0]?.actionId, nextAction: 'continue' });
      expect(seen[2]?.data).toEqual(seen[0]?.data);
      // The thread id is the run's trace id, kept on the record; every call has its own request id.
      expect(new Set(seen.map((e) => e.traceId))).toEqual(new Set(['thread-1']));
      expect(new Set(seen.map((e) => e.requestId)).size).toBe(4);
      expect(mailer.sent.map((m) => m.body)).toEqual(['Please review task T-1.']);
      expect(await runtime.credits.balance(TENANT)).toBe(9);
      // The model is offered the declaration's description and the tool's JSON Schema.
      const spec = convertToOpenAITool(tools[0] as never);
      expect(spec.function).toMatchObject({
        name: 'sendReviewNotice',
        description: describeTool(list[0] as AnyTool).modelDescription,
        parameters: { type: 'object', required: ['taskId', 'recipientId', 'templateId', 'entityVersion', 'body'] },
      });
    });

    it('a parallel identical pair in one turn executes once', async () => {
      const { mailer, runtime, tools } = await setUp();
      const graph = graphOf(
        [
          [
            { name: 'sendReviewNotice', input: notice() },
            { name: 'sendReviewNotice', input: notice() },
          ],
        ],
        tools,
      );
      const result = await graph.invoke({ messages: [{ role: 'user', content: 'Notify.' }] }, thread('thread-2'));
      expect(
        envelopes(result.messages)
          .map((e) => e.deliveryState)
          .sort(),
      ).toEqual(['already_sent', 'sent']);
      expect(mailer.sent).toHaveLength(1);
      expect(await runtime.credits.balance(TENANT)).toBe(9);
    });

    it('approval interrupts the graph with the previewed content; resuming approved sends it once', async () => {
      const { mailer, runtime, tools } = await setUp();
      const graph = graphOf([[{ name: 'sendApprovedNotice', input: notice() }]], tools);
      const config = thread('thread-approve');
      const paused = await graph.invoke({ messages: [{ role: 'user', content: 'Notify, approved.' }] }, config);
      const asked = (paused as { __interrupt__?: { value: unknown }[] }).__interrupt__;
      const [pending] = await runtime.approvals('pending');
      expect(asked?.map((i) => i.value)).toEqual([
        {
          type: 'oncely/approval',
          approvalId: pending?.id,
          tool: 'sendApprovedNotice',
          preview: { to: 'u-42', body: notice().body },
        },
      ]);
      expect(mailer.sent).toHaveLength(0);
      const resumed = await graph.invoke(new Command({ resume: { approved: true, approver: 'alice' } }), config);
      expect(envelopes(resumed.messages)).toMatchObject([
        { deliveryState: 'sent', approvalId: pending?.id, traceId: 'thread-approve' },
      ]);
      expect(await runtime.approval(pending?.id as string)).toMatchObject({ status: 'approved', decidedBy: 'alice' });
      expect(mailer.sent.map((m) => m.body)).toEqual([notice().body]);
      // Another thread asking again is answered from oncely without an interrupt.
      const again = await graphOf([[{ name: 'sendApprovedNotice', input: notice() }]], tools).invoke(
        { messages: [{ role: 'user', content: 'Again.' }] },
        thread('thread-approve-2'),
      );
      expect((again as { __interrupt__?: unknown[] }).__interrupt__ ?? []).toHaveLength(0);
      expect(envelopes(again.messages)).toMatchObject([{ deliveryState: 'already_sent' }]);
      expect(mailer.sent).toHaveLength(1);
    });

    it('resuming rejected records who and why in oncely; the model reads rejected; nothing is sent', async () => {
      const { mailer, runtime, tools } = await setUp();
      const graph = graphOf([[{ name: 'sendApprovedNotice', input: notice() }]], tools);
      const config = thread('thread-reject');
      await graph.invoke({ messages: [{ role: 'user', content: 'Notify, approved.' }] }, config);
      const resumed = await graph.invoke(
        new Command({ resume: { approved: false, approver: 'carol', reason: 'wrong recipient' } }),
        config,
      );
      const [rejected] = envelopes(resumed.messages);
      expect(rejected).toMatchObject({ deliveryState: 'rejected', nextAction: 'stop', error: { code: 'REJECTED' } });
      expect(await runtime.approval(rejected?.approvalId as string)).toMatchObject({
        status: 'rejected',
        decidedBy: 'carol',
        reason: 'wrong recipient',
      });
      expect(mailer.sent).toHaveLength(0);
    });

    it('without interrupt the model reads pending_approval and the approval is decided elsewhere', async () => {
      const { mailer, runtime, tools } = await setUp({ interrupt: undefined });
      const result = await graphOf([[{ name: 'sendApprovedNotice', input: notice() }]], tools).invoke(
        { messages: [{ role: 'user', content: 'Notify.' }] },
        thread('thread-plain'),
      );
      const [pending] = envelopes(result.messages);
      expect(pending).toMatchObject({ deliveryState: 'pending_approval', nextAction: 'wait' });
      expect(await runtime.approve(pending?.approvalId as string, { approver: 'dana' })).toMatchObject({
        deliveryState: 'sent',
      });
      expect(mailer.sent).toHaveLength(1);
    });

    it('budget exhaustion is an envelope the model reads: BUDGET_EXCEEDED, nothing sent', async () => {
      const { mailer, runtime, tools } = await setUp({ tenant: 'broke' });
      await runtime.credits.grant('broke', 1);
      const result = await graphOf(
        [
          [{ name: 'sendReviewNotice', input: notice() }],
          [{ name: 'sendReviewNotice', input: notice({ taskId: 'T-2' }) }],
        ],
        tools,
      ).invoke({ messages: [{ role: 'user', content: 'Notify twice.' }] }, thread('thread-budget'));
      expect(envelopes(result.messages)).toMatchObject([
        { deliveryState: 'sent' },
        { deliveryState: 'failed', error: { code: 'BUDGET_EXCEEDED' } },
      ]);
      expect(mailer.sent).toHaveLength(1);
      expect(await runtime.credits.balance('broke')).toBe(0);
    });
  });
}

describeAdapter('sqlite');
describeAdapter('postgres');
