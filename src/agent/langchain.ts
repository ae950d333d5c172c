import type { RunnableConfig } from '@langchain/core/runnables';
import { type DynamicStructuredTool, tool } from '@langchain/core/tools';
import type { ToolEnvelope } from './envelope.js';
import { objectJsonSchema } from './json-schema.js';
import { describeTool } from './registry.js';
import type { AgentRuntime, CallOptions } from './runtime.js';
import type { AnyTool } from './tool.js';

/** What a LangGraph interrupt asks the person: the oncely approval, the exact content previewed. */
export interface ApprovalInterrupt {
  type: 'oncely/approval';
  approvalId: string;
  tool: string;
  preview: unknown;
}

/** The value a graph resumes an approval interrupt with: `new Command({ resume: { approved: true, approver } })`. */
export interface ApprovalDecision {
  approved: boolean;
  /** Who decided; the adapter's `approver` when unset. */
  approver?: string;
  reason?: string;
}

/** Options of `toLangChainTools`. */
export interface LangChainToolsOptions {
  /** The runtime that runs the tools: one execution per intent, approvals, credits. */
  runtime: AgentRuntime;
  /** The tenant of the calls (the business tenant, not the agent's identity); the runtime's when unset. */
  tenant?: string | ((config: RunnableConfig) => string | undefined);
  /**
   * The agent run's trace id (e.g. the graph's `thread_id`): kept on each record its calls claim and
   * returned in every envelope, the same across retries (each call has its own `requestId`).
   */
  traceId?: string | ((config: RunnableConfig) => string | undefined);
  /**
   * LangGraph's `interrupt` (from `@langchain/langgraph`), to ask a person inside the graph: a call
   * awaiting approval interrupts with an {@link ApprovalInterrupt}, and the resumed graph re-runs
   * the tool, which decides the oncely approval with the {@link ApprovalDecision} and sends the
   * previewed content once. Without it the model reads `pending_approval` and the approval is
   * decided elsewhere (runtime.approve, the dashboard).
   */
  interrupt?: (value: ApprovalInterrupt) => unknown;
  /** Who decides when the decision names nobody. */
  approver?: string;
}

/**
 * Turns oncely tools into LangChain tools (for `model.bindTools`, LangGraph's ToolNode,
 * `createAgent`): the declaration's `modelDescription` (key fields and the replay rule), the tool's
 * JSON Schema, and the envelope, as JSON, as the tool's result.
 * @example const tools = toLangChainTools([sendReviewNotice], { runtime, interrupt, traceId: (c) => c.configurable?.thread_id })
 */
export function toLangChainTools(tools: readonly AnyTool[], options: LangChainToolsOptions): DynamicStructuredTool[] {
  return tools.map(
    (declared) =>
      tool(
        async (input: unknown, config: RunnableConfig) => JSON.stringify(await run(declared, input, config, options)),
        {
          name: declared.name,
          description: describeTool(declared).modelDescription,
          schema: objectJsonSchema(declared),
        },
      ) as unknown as DynamicStructuredTool,
  );
}

async function run(
  declared: AnyTool,
  input: unknown,
  config: RunnableConfig,
  options: LangChainToolsOptions,
): Promise<ToolEnvelope> {
  const ids = idsOf(config, options);
  const envelope = await options.runtime.call(declared.name, input, ids);
  if (envelope.deliveryState !== 'pending_approval' || !envelope.approvalId || !options.interrupt) return envelope;
  const approval = await options.runtime.approval(envelope.approvalId);
  // Throws the graph's interrupt the first time; on resume answers the person's decision.
  const decision = options.interrupt({
    type: 'oncely/approval',
    approvalId: envelope.approvalId,
    tool: declared.name,
    preview: approval?.preview ?? null,
  }) as ApprovalDecision | undefined;
  const approver = decision?.approver ?? options.approver;
  if (!decision || !approver?.trim()) {
    const message = 'resumed without a decision naming who decided; nothing was sent';
    return { ...envelope, error: { code: 'APPROVER_REQUIRED', message }, message };
  }
  const by = { approver, ...(ids.traceId === undefined ? {} : { traceId: ids.traceId }) };
  return decision.approved
    ? options.runtime.approve(envelope.approvalId, by)
    : options.runtime.reject(envelope.approvalId, {
        ...by,
        ...(decision.reason === undefined ? {} : { reason: decision.reason }),
      });
}

function idsOf(config: RunnableConfig, options: LangChainToolsOptions): CallOptions {
  const tenant = typeof options.tenant === 'function' ? options.tenant(config) : options.tenant;
  const traceId = typeof options.traceId === 'function' ? options.traceId(config) : options.traceId;
  return { ...(tenant === undefined ? {} : { tenant }), ...(traceId === undefined ? {} : { traceId }) };
}
