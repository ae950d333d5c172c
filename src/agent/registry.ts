import { ttlToMs } from '../core/duration.js';
import { type AnyTool, isDestructive } from './tool.js';

/** One tool's declaration as data: the single source for docs, tests and prompts. */
export interface ToolDescription {
  name: string;
  description: string;
  keyFields: readonly string[];
  fingerprintFields: readonly string[];
  /** Milliseconds, or null for permanent. */
  ttlMs: number | null;
  approval: 'required' | 'none';
  cost: { credits: number } | null;
  destructive: boolean;
}

/** Describes tools as JSON-ready data. */
export function describeTools(tools: readonly AnyTool[]): ToolDescription[] {
  return tools.map((tool) => ({
    name: tool.name,
    description: tool.description,
    keyFields: tool.idempotency.keyFields,
    fingerprintFields: tool.idempotency.fingerprintFields ?? tool.idempotency.keyFields,
    ttlMs: ttlToMs(tool.idempotency.ttl),
    approval: tool.outbound?.approval ?? 'none',
    cost: tool.cost ? { credits: tool.cost.credits } : null,
    destructive: isDestructive(tool),
  }));
}

/**
 * A set of tools with `describe()`.
 * @example createRegistry([sendReviewNotice]).describe() // [{ name, keyFields, ttlMs, approval, cost, ... }]
 */
export function createRegistry(tools: readonly AnyTool[]) {
  return { tools, describe: () => describeTools(tools) };
}
