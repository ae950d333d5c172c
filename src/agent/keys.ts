import { OncelyError } from '../core/errors.js';
import { stableUuid } from '../core/ids.js';
import { validateId } from '../core/key.js';
import type { EffectTool } from './tool.js';

/** Checks the ids a caller gives as the engine does, before anything is written (TRACE_ID_INVALID). */
export function checkIds(ids: { traceId?: string; requestId?: string }): void {
  if (ids.traceId !== undefined) validateId(ids.traceId, 'traceId');
  if (ids.requestId !== undefined) validateId(ids.requestId, 'requestId');
}

/** What a tool's engine action starts with; the rest is the tool's name. */
export const TOOL_ACTION_PREFIX = 'tool:';

/** The engine's action of a tool's calls (their records, its reconcile function). */
export function toolAction(name: string): string {
  return `${TOOL_ACTION_PREFIX}${name}`;
}

/**
 * The action's id: the same on every retry of one intent. With `actionFields`, their values are
 * part of it, so a run after the record expired is a new action only when they differ.
 */
export function actionIdOf(tool: EffectTool, tenant: string, key: string, input: Record<string, unknown>): string {
  const fields = tool.idempotency.actionFields;
  const parts = fields ? [JSON.stringify(fields.map((f) => input[f] ?? null))] : [];
  return recordActionId(tenant, toolAction(tool.name), key, ...parts);
}

/** The action id of a tool call's record (its tenant, engine action and key), with `actionFields`' values if any. */
export function recordActionId(tenant: string, action: string, key: string, ...parts: string[]): string {
  return stableUuid(tenant, action, key, 'action', ...parts);
}

/** The key fields' values of a validated input, in declared order; KEY_REQUIRED for a missing one. */
export function keyParts(tool: EffectTool, input: Record<string, unknown>): (string | number)[] {
  return tool.idempotency.keyFields.map((field) => {
    const value = input[field];
    if (typeof value === 'string' || typeof value === 'number') return value;
    throw new OncelyError('KEY_REQUIRED', `key field ${field} is missing`);
  });
}
