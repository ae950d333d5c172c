import { type Duration, toMs, ttlToMs } from '../core/duration.js';
import { type AnyTool, isDestructive } from './tool.js';

/** One tool's declaration as data: the single source for docs, tests, prompts and every adapter's description. */
export interface ToolDescription {
  name: string;
  /** The declaration's own description. */
  description: string;
  /** A tool that changes nothing: no key, no record, no reservation; every call runs. */
  readOnly: boolean;
  /** Empty for a read-only tool. */
  keyFields: readonly string[];
  fingerprintFields: readonly string[];
  /** Fingerprint fields that make a run after expiry a new action (a new charge); empty when none are declared. */
  actionFields: readonly string[];
  /** Milliseconds a result answers duplicates, or null for permanent (and for a read-only tool, which keeps none). */
  ttlMs: number | null;
  approval: 'required' | 'none';
  /** How long an approval may wait, in milliseconds; null without approval. */
  approvalTtlMs: number | null;
  outbound: boolean;
  cost: { credits: number } | null;
  destructive: boolean;
  /** Whether an unknown outcome is asked of the downstream (`reconcile`). */
  reconciles: boolean;
  /** What the model reads: the description, the key fields and the replay rule (see `modelDescription`). */
  modelDescription: string;
}

const DEFAULT_APPROVAL_TTL: Duration = '24h';

/** Describes tools as JSON-ready data. */
export function describeTools(tools: readonly AnyTool[]): ToolDescription[] {
  return tools.map(describeTool);
}

/** Describes one tool. */
export function describeTool(tool: AnyTool): ToolDescription {
  const approval = tool.outbound?.approval ?? 'none';
  const described: Omit<ToolDescription, 'modelDescription'> = tool.readOnly
    ? {
        name: tool.name,
        description: tool.description,
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
      }
    : {
        name: tool.name,
        description: tool.description,
        readOnly: false,
        keyFields: tool.idempotency.keyFields,
        fingerprintFields: tool.idempotency.fingerprintFields ?? tool.idempotency.keyFields,
        actionFields: tool.idempotency.actionFields ?? [],
        ttlMs: ttlToMs(tool.idempotency.ttl),
        approval,
        approvalTtlMs:
          approval === 'required' ? toMs(tool.outbound?.approvalTtl ?? DEFAULT_APPROVAL_TTL, 'approvalTtl') : null,
        outbound: Boolean(tool.outbound),
        cost: tool.cost ? { credits: tool.cost.credits } : null,
        destructive: isDestructive(tool),
        reconciles: Boolean(tool.reconcile),
      };
  return { ...described, modelDescription: modelDescription(described) };
}

/**
 * The text a model reads for a tool: its description, then the rule that makes calling again
 * safe, named by the key fields, so a model that lost an answer calls again instead of inventing
 * a "repair" (another body, another recipient).
 */
export function modelDescription(tool: Omit<ToolDescription, 'modelDescription'>): string {
  const own = tool.description.trim().replace(/([^.!?])$/, '$1.');
  if (tool.readOnly) return `${own} Read-only: it changes nothing and needs no key; call it whenever you need to.`;
  const same = `the same ${list(tool.keyFields)}`;
  const parts = [
    own,
    `Calling again with ${same} returns the first result as already_sent; do not retry to repair it.`,
  ];
  if (tool.fingerprintFields.some((f) => !tool.keyFields.includes(f)))
    parts.push(
      `A call with ${same} but another ${list(tool.fingerprintFields.filter((f) => !tool.keyFields.includes(f)))} is refused (KEY_REUSED).`,
    );
  if (tool.ttlMs !== null)
    parts.push(
      `After ${formatMs(tool.ttlMs)} ${same} runs again${tool.actionFields.length ? ` only with another ${list(tool.actionFields)}` : ''}.`,
    );
  if (tool.approval === 'required')
    parts.push(
      'A person approves the exact content first (pending_approval): wait, do not call again with other content.',
    );
  if (tool.cost) parts.push(`Each action costs ${tool.cost.credits} credit(s), charged once.`);
  return parts.join(' ');
}

/** "a, b and c". */
function list(fields: readonly string[]): string {
  return fields.length < 2 ? (fields[0] ?? '') : `${fields.slice(0, -1).join(', ')} and ${fields.at(-1)}`;
}

function formatMs(ms: number): string {
  for (const [unit, size] of [
    ['d', 86_400_000],
    ['h', 3_600_000],
    ['m', 60_000],
    ['s', 1000],
  ] as const)
    if (ms >= size && ms % size === 0) return `${ms / size}${unit}`;
  return `${ms}ms`;
}

/**
 * A set of tools with `describe()`.
 * @example createRegistry([sendReviewNotice]).describe() // [{ name, keyFields, ttlMs, approval, cost, modelDescription, ... }]
 */
export function createRegistry(tools: readonly AnyTool[]) {
  return { tools, describe: () => describeTools(tools) };
}
