import { randomUUID } from 'node:crypto';
import type { McpServer, RegisteredTool } from '@modelcontextprotocol/sdk/server/mcp.js';
import type { RequestHandlerExtra } from '@modelcontextprotocol/sdk/shared/protocol.js';
import type {
  CallToolResult,
  ServerNotification,
  ServerRequest,
  ToolAnnotations,
} from '@modelcontextprotocol/sdk/types.js';
import * as z from 'zod/v4';
import type { AnyErrorCode } from '../core/errors.js';
import { validateId } from '../core/key.js';
import { contextFromHeaders, withContext } from '../core/tracing.js';
import type { ToolEnvelope } from './envelope.js';
import { standardJsonSchema } from './json-schema.js';
import { describeTool } from './registry.js';
import type { AgentRuntime } from './runtime.js';
import { type AnyTool, isDestructive } from './tool.js';

/** What an MCP tool handler gets besides its arguments: the request's `_meta`, auth info, session... */
export type McpRequestExtra = RequestHandlerExtra<ServerRequest, ServerNotification>;

/** Options of `registerTools`. */
export interface RegisterToolsOptions {
  /** The runtime that runs the tools: one execution per intent, approvals, credits. */
  runtime: AgentRuntime;
  /**
   * The tenant of a call: fixed, or from the request (e.g. `(extra) => extra.authInfo?.clientId`).
   * Undefined falls back to the runtime's tenant.
   */
  tenant?: string | ((extra: McpRequestExtra) => string | undefined);
}

/**
 * The `_meta` fields where a client may supply its own idempotency key for a call, used instead of
 * the tool's key fields. The namespaced one is preferred; if both are present they must be equal.
 */
export const META_KEY_FIELDS = ['oncely/idempotencyKey', 'idempotencyKey'] as const;

/** The `_meta` field where a client may pass the intent's trace id, the same on its retries (CallOptions `traceId`). */
export const META_TRACE_ID = 'oncely/traceId';

/** The envelope, as the `outputSchema` of every tool; open to fields a later version adds. */
const ENVELOPE_SCHEMA = z.looseObject({
  success: z.boolean(),
  data: z.unknown(),
  deliveryState: z.enum(['sent', 'already_sent', 'read', 'pending_approval', 'rejected', 'failed', 'unknown']),
  idempotencyKey: z.string().nullable(),
  actionId: z.string().nullable(),
  firstExecutedAt: z.number().nullable(),
  traceId: z.string().nullable(),
  requestId: z.string(),
  nextAction: z.enum(['continue', 'wait', 'stop']),
  approvalId: z.string().optional(),
  error: z.looseObject({ code: z.string(), message: z.string() }).optional(),
  message: z.string(),
});

/**
 * Registers oncely tools on an MCP server, so any client may call them any number of times.
 *
 * - The description is the declaration's `modelDescription` (registry.ts): the tool's own text, its
 *   key fields and the replay rule, so the model knows calling again is safe and repairing is not.
 * - Annotations are honest: `idempotentHint: true` (a repeated call has no further effect),
 *   `destructiveHint` from the declaration, `readOnlyHint` true only for a `readOnly` tool, and
 *   `openWorldHint: true` for a tool that sends an outbound message (left unset otherwise: MCP's
 *   default, "may be open").
 * - Every call answers with the envelope, as JSON text and as `structuredContent` (described by the
 *   tool's `outputSchema`); `isError` is set when it did not succeed, except while awaiting approval.
 * - The arguments go to the runtime as the client sent them: oncely validates them once, so a bad
 *   input or a missing key field is an envelope (`INPUT_INVALID`, `KEY_REQUIRED`) the model can act
 *   on. The advertised `inputSchema` is the tool's own, as JSON Schema (Standard JSON Schema, e.g.
 *   zod 4.2+, arktype; or zod 4; any other schema is advertised as an open object).
 * - A client key in `_meta['oncely/idempotencyKey']` or `_meta.idempotencyKey` replaces the key
 *   built from the key fields (prefixed by the tool name, like every key).
 * - `_meta['oncely/traceId']` is the intent's trace id (kept by the first claim, returned in the
 *   envelope); a W3C `traceparent` (and `tracestate`) in `_meta`, or else in the headers of an
 *   MCP request over HTTP, continues the caller's trace: the call's span is a child of it.
 * @example registerTools(server, [sendReviewNotice], { runtime, tenant: (extra) => extra.authInfo?.clientId })
 */
export function registerTools(
  server: McpServer,
  tools: readonly AnyTool[],
  options: RegisterToolsOptions,
): RegisteredTool[] {
  const { runtime } = options;
  return tools.map((tool) =>
    server.registerTool(
      tool.name,
      {
        description: describeTool(tool).modelDescription,
        inputSchema: passThrough(tool),
        outputSchema: ENVELOPE_SCHEMA,
        annotations: annotationsOf(tool),
      },
      async (args, extra) => {
        const key = clientKey(extra._meta);
        if ('error' in key) return toResult(key.error);
        const traceId = metaTraceId(extra._meta);
        if (typeof traceId === 'object') return toResult(traceId.error);
        const tenant = typeof options.tenant === 'function' ? options.tenant(extra) : options.tenant;
        const envelope = await withContext(contextFromHeaders(traceCarrier(extra)), () =>
          runtime.call(tool.name, args, { key: key.value, tenant, ...(traceId !== undefined ? { traceId } : {}) }),
        );
        return toResult(envelope);
      },
    ),
  );
}

/** The hints a client sees for a tool. */
export function annotationsOf(tool: AnyTool): ToolAnnotations {
  return {
    readOnlyHint: tool.readOnly === true,
    destructiveHint: isDestructive(tool),
    idempotentHint: true,
    ...(tool.outbound ? { openWorldHint: true } : {}),
  };
}

function toResult(envelope: ToolEnvelope): CallToolResult {
  return {
    content: [{ type: 'text', text: JSON.stringify(envelope) }],
    structuredContent: { ...envelope },
    isError: !envelope.success && envelope.deliveryState !== 'pending_approval',
  };
}

/** The client's key from `_meta`, if any; two different ones are refused. */
function clientKey(meta: Record<string, unknown> | undefined): { value: string | undefined } | { error: ToolEnvelope } {
  const values = META_KEY_FIELDS.map((field) => meta?.[field]).filter((v) => v !== undefined);
  if (values.length === 0) return { value: undefined };
  const [first] = values;
  if (typeof first !== 'string' || values.some((v) => v !== first))
    return {
      error: keyInvalid(
        `_meta ${META_KEY_FIELDS.join(' / ')} must be one string key${values.length > 1 ? ' (two different ones were sent)' : ''}`,
      ),
    };
  return { value: first };
}

/** The client's trace id from `_meta`, if any; a malformed one is refused as the engine would. */
function metaTraceId(meta: Record<string, unknown> | undefined): string | undefined | { error: ToolEnvelope } {
  const value = meta?.[META_TRACE_ID];
  if (value === undefined) return undefined;
  try {
    return validateId(value, `_meta ${META_TRACE_ID}`);
  } catch (error) {
    return { error: refused('TRACE_ID_INVALID', (error as Error).message) };
  }
}

/** The caller's W3C trace context: from `_meta` when it carries one, else from the HTTP request's headers. */
function traceCarrier(extra: McpRequestExtra): Record<string, string | string[] | undefined> {
  const meta = extra._meta;
  if (typeof meta?.traceparent === 'string')
    return {
      traceparent: meta.traceparent,
      ...(typeof meta.tracestate === 'string' ? { tracestate: meta.tracestate } : {}),
    };
  const headers = extra.requestInfo?.headers;
  return headers ? { traceparent: headers.traceparent, tracestate: headers.tracestate } : {};
}

function keyInvalid(message: string): ToolEnvelope {
  return refused('KEY_INVALID', message);
}

/** An envelope for a call refused before the runtime saw it. */
function refused(code: AnyErrorCode, message: string): ToolEnvelope {
  return {
    success: false,
    data: null,
    deliveryState: 'failed',
    idempotencyKey: null,
    actionId: null,
    firstExecutedAt: null,
    traceId: null,
    requestId: randomUUID(),
    nextAction: 'stop',
    error: { code, message },
    message,
  };
}

/**
 * A schema the MCP server lists as the tool's JSON Schema but that lets any object through, so the
 * runtime is the one validator (the server would otherwise refuse bad input before oncely sees it,
 * with a message that is not an envelope, and parse the input twice). zod merges the metadata into
 * the JSON Schema it emits.
 */
function passThrough(tool: AnyTool) {
  return z.looseObject({}).meta(jsonSchemaOf(tool) as z.core.GlobalMeta);
}

function jsonSchemaOf(tool: AnyTool): Record<string, unknown> {
  const standard = standardJsonSchema(tool);
  if (standard) return standard;
  const schema = tool.input as unknown as { _zod?: unknown };
  try {
    if (schema._zod) return z.toJSONSchema(schema as unknown as z.core.$ZodType, { io: 'input', target: 'draft-7' });
  } catch {
    // Not representable as JSON Schema: advertised as an open object, still validated by oncely.
  }
  return { type: 'object' };
}
