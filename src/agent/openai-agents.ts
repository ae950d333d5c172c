import { type FunctionTool, type RunContext, type RunState, type RunToolApprovalItem, tool } from '@openai/agents';
import { InvalidArgumentError } from '../core/errors.js';
import type { ToolEnvelope } from './envelope.js';
import { objectJsonSchema } from './json-schema.js';
import { describeTool } from './registry.js';
import type { AgentRuntime, CallOptions } from './runtime.js';
import type { AnyTool } from './tool.js';

/** Who decides approvals: a fixed identity, or one from the run's context (the signed-in user). */
export type OpenAiAgentsApprover = string | ((runContext: RunContext<unknown> | undefined) => string | undefined);

/** A function tool as `toOpenAiAgentsTools` makes it: JSON Schema parameters, the envelope as its result. */
export type OncelyFunctionTool = FunctionTool<unknown, ReturnType<typeof objectJsonSchema>, unknown>;

/** Options of `toOpenAiAgentsTools` and `rejectApproval`. */
export interface OpenAiAgentsToolsOptions {
  /** The runtime that runs the tools: one execution per intent, approvals, credits. */
  runtime: AgentRuntime;
  /** The tenant of the calls (the business tenant, not the agent's identity); the runtime's when unset. */
  tenant?: string;
  /**
   * The agent run's trace id, made where the run began: kept on each record its calls claim and
   * returned in every envelope, the same across retries (each call has its own `requestId`).
   */
  traceId?: string;
  /**
   * Who approved: the SDK's `state.approve(item)` carries no identity. Without one an approved
   * call sends nothing and answers `pending_approval` with APPROVER_REQUIRED.
   */
  approver?: OpenAiAgentsApprover;
}

/**
 * Turns oncely tools into OpenAI Agents SDK function tools: `new Agent({ tools: toOpenAiAgentsTools([...], { runtime }) })`.
 *
 * - `execute` returns the envelope (the model reads `deliveryState`, `nextAction`); the description
 *   is the declaration's `modelDescription`, with the key fields and the replay rule.
 * - The parameters are the tool's JSON Schema, non-strict and open: oncely validates, so a bad
 *   input or a missing key field is an envelope (`INPUT_INVALID`, `KEY_REQUIRED`).
 * - A tool declared `outbound.approval: 'required'` has `needsApproval`, asked of oncely: the call
 *   records the oncely approval of the previewed content and interrupts the run while it is
 *   pending; once oncely has an outcome (approved and sent, rejected) it answers that instead.
 *   After `state.approve(item)` the resumed run's `execute` approves in oncely with `approver` and
 *   sends exactly the previewed content, once. Reject with `rejectApproval` so oncely records it.
 * @example const tools = toOpenAiAgentsTools([sendReviewNotice], { runtime, tenant: org.id, approver: (rc) => rc?.context.user })
 */
export function toOpenAiAgentsTools(
  tools: readonly AnyTool[],
  options: OpenAiAgentsToolsOptions,
): OncelyFunctionTool[] {
  const call = (name: string, input: unknown) => options.runtime.call(name, input, callOptions(options));
  return tools.map((declared) =>
    tool({
      name: declared.name,
      description: describeTool(declared).modelDescription,
      parameters: objectJsonSchema(declared),
      strict: false,
      ...(declared.outbound?.approval === 'required'
        ? {
            needsApproval: async (_runContext: RunContext, input: unknown) =>
              (await call(declared.name, input)).deliveryState === 'pending_approval',
          }
        : {}),
      execute: async (input, runContext) => {
        const envelope = await call(declared.name, input);
        // Still pending in oncely, yet executing: the SDK's run was approved (needsApproval said so).
        if (envelope.deliveryState !== 'pending_approval' || !envelope.approvalId) return envelope;
        const approver = approverOf(options.approver, runContext);
        if (!approver) {
          const message = 'approved in the run, but no approver is configured to record who approved; nothing was sent';
          return { ...envelope, error: { code: 'APPROVER_REQUIRED', message }, message };
        }
        return options.runtime.approve(envelope.approvalId, { approver, ...idsOf(options) });
      },
    }),
  );
}

/**
 * Rejects an interrupted call in oncely (who, why) and in the run: `state.reject(item)` with the
 * envelope as the text the model reads. Resume the run with the same state afterwards.
 * @example await rejectApproval(result.state, result.interruptions[0], { runtime, approver: 'carol', reason: 'wrong recipient' })
 */
export async function rejectApproval(
  state: RunState<unknown, never>,
  item: RunToolApprovalItem,
  options: OpenAiAgentsToolsOptions & { reason?: string },
): Promise<ToolEnvelope> {
  const raw = item.rawItem as { name?: string; arguments?: string };
  const name = item.toolName ?? raw.name ?? '';
  let envelope = await options.runtime.call(name, JSON.parse(raw.arguments ?? '{}'), callOptions(options));
  if (envelope.deliveryState === 'pending_approval' && envelope.approvalId) {
    const approver = approverOf(options.approver, state._context as RunContext<unknown>);
    if (!approver) throw new InvalidArgumentError('rejectApproval needs an approver to record who rejected');
    envelope = await options.runtime.reject(envelope.approvalId, {
      approver,
      ...(options.reason === undefined ? {} : { reason: options.reason }),
      ...idsOf(options),
    });
  }
  state.reject(item, { message: JSON.stringify(envelope) });
  return envelope;
}

function callOptions(options: OpenAiAgentsToolsOptions): CallOptions {
  return { ...(options.tenant === undefined ? {} : { tenant: options.tenant }), ...idsOf(options) };
}

function idsOf(options: OpenAiAgentsToolsOptions): { traceId?: string } {
  return options.traceId === undefined ? {} : { traceId: options.traceId };
}

function approverOf(approver: OpenAiAgentsApprover | undefined, runContext: RunContext<unknown> | undefined) {
  const name = typeof approver === 'function' ? approver(runContext) : approver;
  return name?.trim() ? name : undefined;
}
