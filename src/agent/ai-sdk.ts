import {
  asSchema,
  type FlexibleSchema,
  type JSONSchema7,
  jsonSchema,
  type ModelMessage,
  type ToolApprovalResponse,
  type ToolExecutionOptions,
  type ToolSet,
  tool,
} from 'ai';
import { InvalidArgumentError } from '../core/errors.js';
import type { ToolEnvelope } from './envelope.js';
import { describeTool } from './registry.js';
import type { AgentRuntime, CallOptions } from './runtime.js';
import type { AnyTool } from './tool.js';

/** An approval response the app sent through the AI SDK, for the approver to be named from. */
export interface AiSdkApproval {
  toolName: string;
  toolCallId: string;
  /** The SDK's approval id (the oncely approval id is the envelope's `approvalId`). */
  approvalId: string;
  approved: boolean;
  /** The response's `reason`, if the app gave one. */
  reason?: string;
  /** `experimental_context` of the generateText / streamText call, when there is one. */
  context?: unknown;
}

/** Who decides approvals: a fixed identity, or one derived from the response and call context. */
export type Approver = string | ((approval: AiSdkApproval) => string | undefined | PromiseLike<string | undefined>);

/** Options of `toAiSdkTools` and `rejectDeniedApprovals`. */
export interface AiSdkToolsOptions {
  /** The runtime that runs the tools: one execution per intent, approvals, credits. */
  runtime: AgentRuntime;
  /** The tenant of the calls; the runtime's when unset. */
  tenant?: string;
  /**
   * Who approved or denied, recorded by oncely. The SDK's approval response carries only
   * `approved` and an optional `reason`, no identity: pass the person on whose behalf this request
   * runs (the signed-in user who clicked approve), or a function of the response (its `reason`, the
   * call's `experimental_context`). Without one, an approval is not recorded and nothing is sent:
   * the call answers `pending_approval` with the error `APPROVER_REQUIRED`.
   */
  approver?: Approver;
  /**
   * The agent run's trace id, made where the run began: kept on each record its calls claim and
   * returned in every envelope, the same across retries (each call has its own `requestId`).
   */
  traceId?: string;
}

/**
 * Turns oncely tools into AI SDK tools: `generateText({ tools: toAiSdkTools([...], { runtime }) })`.
 *
 * - `execute` returns the envelope, so the model sees `deliveryState` (`already_sent`...) and `nextAction`;
 *   the description is the declaration's `modelDescription` (its key fields and the replay rule).
 * - The input reaches oncely as the model wrote it: oncely validates it once and answers a bad input
 *   or a missing key field with an envelope (`INPUT_INVALID`, `KEY_REQUIRED`). The model is shown the
 *   tool's own JSON Schema.
 * - A tool declared `outbound.approval: 'required'` sets `needsApproval: true`: the SDK stops with a
 *   `tool-approval-request`; when the app answers with an approving `tool-approval-response`, the SDK
 *   calls `execute`, which records the oncely approval (bound to the previewed content) with
 *   `approver` and sends exactly that content, once. A repeated approval, or approving a duplicate
 *   of an intent already sent, answers `already_sent`. `execute` approves only when the last message
 *   holds an approving response for this very tool call.
 * - A denial never reaches `execute` (the SDK answers the model `execution-denied` itself): pass the
 *   same messages to `rejectDeniedApprovals` to record it in oncely.
 * @example const tools = toAiSdkTools([sendReviewNotice], { runtime, tenant: org.id, approver: user.email })
 */
export function toAiSdkTools(tools: readonly AnyTool[], options: AiSdkToolsOptions): ToolSet {
  return Object.fromEntries(
    tools.map((declared) => [
      declared.name,
      tool<Record<string, unknown>, ToolEnvelope>({
        description: describeTool(declared).modelDescription,
        inputSchema: inputSchemaOf(declared),
        ...(declared.outbound?.approval === 'required' ? { needsApproval: true } : {}),
        execute: (input, execution) => execute(declared, input, execution, options),
      }),
    ]),
  );
}

/**
 * Records in oncely the approvals the app denied through the AI SDK: call it with the messages you
 * pass to `generateText` / `streamText` (the denials are in the last message, a `tool` message, as
 * the SDK reads them). Each denied call of an approval-required tool is rejected with `approver` and
 * the response's reason; oncely answers that intent `rejected` from then on. Returns one envelope
 * per denial handled.
 * @example await rejectDeniedApprovals(messages, [sendReviewNotice], { runtime, approver: user.email })
 */
export async function rejectDeniedApprovals(
  messages: readonly ModelMessage[],
  tools: readonly AnyTool[],
  options: AiSdkToolsOptions,
): Promise<ToolEnvelope[]> {
  const byName = new Map(tools.map((t) => [t.name, t]));
  const results: ToolEnvelope[] = [];
  for (const response of lastApprovalResponses(messages)) {
    if (response.approved) continue;
    const call = toolCallOf(messages, response.approvalId);
    const declared = call && byName.get(call.toolName);
    if (!call || !declared || declared.outbound?.approval !== 'required') continue;
    const envelope = await options.runtime.call(declared.name, call.input, callOptions(options));
    if (envelope.deliveryState !== 'pending_approval' || !envelope.approvalId) {
      results.push(envelope);
      continue;
    }
    const approver = await approverOf(options.approver, {
      toolName: declared.name,
      toolCallId: call.toolCallId,
      approvalId: response.approvalId,
      approved: false,
      ...(response.reason === undefined ? {} : { reason: response.reason }),
    });
    if (!approver) throw new InvalidArgumentError('rejectDeniedApprovals needs an approver to record who denied');
    results.push(
      await options.runtime.reject(envelope.approvalId, {
        approver,
        ...(options.traceId === undefined ? {} : { traceId: options.traceId }),
        ...(response.reason === undefined ? {} : { reason: response.reason }),
      }),
    );
  }
  return results;
}

async function execute(
  declared: AnyTool,
  input: Record<string, unknown>,
  execution: ToolExecutionOptions,
  options: AiSdkToolsOptions,
): Promise<ToolEnvelope> {
  const envelope = await options.runtime.call(declared.name, input, callOptions(options));
  if (envelope.deliveryState !== 'pending_approval' || !envelope.approvalId) return envelope;
  // Awaiting approval in oncely: approve only on the app's approving response to this tool call.
  const response = lastApprovalResponses(execution.messages).find(
    (r) => r.approved && toolCallOf(execution.messages, r.approvalId)?.toolCallId === execution.toolCallId,
  );
  if (!response) return envelope;
  const approver = await approverOf(options.approver, {
    toolName: declared.name,
    toolCallId: execution.toolCallId,
    approvalId: response.approvalId,
    approved: true,
    ...(response.reason === undefined ? {} : { reason: response.reason }),
    ...(execution.experimental_context === undefined ? {} : { context: execution.experimental_context }),
  });
  if (!approver) {
    const message = 'approved in the AI SDK, but no approver is configured to record who approved; nothing was sent';
    return { ...envelope, error: { code: 'APPROVER_REQUIRED', message }, message };
  }
  return options.runtime.approve(envelope.approvalId, { approver, ...callOptions(options) });
}

function callOptions(options: AiSdkToolsOptions): CallOptions {
  return {
    ...(options.tenant === undefined ? {} : { tenant: options.tenant }),
    ...(options.traceId === undefined ? {} : { traceId: options.traceId }),
  };
}

async function approverOf(approver: Approver | undefined, approval: AiSdkApproval): Promise<string | undefined> {
  const name = typeof approver === 'function' ? await approver(approval) : approver;
  return name?.trim() ? name : undefined;
}

/** The approval responses of the last message, where the SDK reads them. */
function lastApprovalResponses(messages: readonly ModelMessage[]): ToolApprovalResponse[] {
  const last = messages.at(-1);
  if (last?.role !== 'tool') return [];
  return last.content.filter((part): part is ToolApprovalResponse => part.type === 'tool-approval-response');
}

/** The tool call an SDK approval request was made for. */
function toolCallOf(
  messages: readonly ModelMessage[],
  approvalId: string,
): { toolCallId: string; toolName: string; input: unknown } | undefined {
  let toolCallId: string | undefined;
  for (const message of messages)
    if (message.role === 'assistant' && typeof message.content !== 'string')
      for (const part of message.content)
        if (part.type === 'tool-approval-request' && part.approvalId === approvalId) toolCallId = part.toolCallId;
  if (toolCallId === undefined) return undefined;
  for (const message of messages)
    if (message.role === 'assistant' && typeof message.content !== 'string')
      for (const part of message.content)
        if (part.type === 'tool-call' && part.toolCallId === toolCallId)
          return { toolCallId, toolName: part.toolName, input: part.input };
  return undefined;
}

/** The tool's JSON Schema for the model, without validation: oncely validates. */
function inputSchemaOf(declared: AnyTool) {
  return jsonSchema<Record<string, unknown>>(async () => {
    try {
      return await asSchema(declared.input as unknown as FlexibleSchema<unknown>).jsonSchema;
    } catch {
      // Not convertible (a Standard Schema without JSON Schema): an open object, still validated by oncely.
      return { type: 'object' } satisfies JSONSchema7;
    }
  });
}
