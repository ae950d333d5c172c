import type { Duration } from '../core/duration.js';
import { OncelyError } from '../core/errors.js';
import type { Flows } from '../flows/flows.js';

/**
 * A flow's outcome read the way the kit reports a call, for a storm's or crash child's `run`: waits
 * for the flow (started by `flows.start` or a host handler) with this process's worker running,
 * and answers `{ value, replayed, record: { attempts } }`. `replayed`: the flow had completed
 * before this call looked, so nothing of it ran here; `attempts` are the flow's runs (claims),
 * above 1 once a worker took over a run whose process died ('taken over'). A flow that failed
 * throws FLOW_FAILED; one that is not done within `timeout` (default 60 s), TIMEOUT.
 * @example const { workflowId } = await flows.start(ship, input); return flowResult(flows, workflowId);
 */
export async function flowResult(
  flows: Flows,
  workflowId: string,
  options: { timeout?: Duration } = {},
): Promise<{ value: unknown; replayed: boolean; record: { attempts: number } }> {
  const before = await flows.get(workflowId);
  if (!before) throw new OncelyError('NOT_FOUND', `no flow ${workflowId}`);
  const replayed = before.status === 'completed';
  if (!replayed) await flows.startWorker();
  const value = await flows.result(workflowId, options);
  const after = await flows.get(workflowId);
  return { value, replayed, record: { attempts: after?.runs ?? before.runs } };
}
