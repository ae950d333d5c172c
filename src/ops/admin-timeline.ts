import type { Db } from '../db/types.js';
import type { Flows } from '../flows/flows.js';

type ShownFlow = NonNullable<Awaited<ReturnType<Flows['show']>>>;

/** The prefix replay.ts gives a compensation's step id: `compensate:<step id>`. */
const COMPENSATE = 'compensate:';

/**
 * A flow's steps as the dashboard's timeline labels them, from what is stored: `memoized` when
 * the step was written by a run before the flow's last one (that run and any later answered it
 * from its stored result; null when the row predates the steps' `run` column), `retried` when it
 * took more than one attempt, `compensated` when its compensation step completed, and
 * `compensation` for that compensation's own row.
 */
export async function withTimeline(db: Db, flow: ShownFlow) {
  const rows = await db.all<{ step_id: string; run: number | string | null }>(
    'SELECT step_id, run FROM oncely_flow_steps WHERE workflow_id = ?',
    [flow.workflowId],
  );
  const runOf = new Map(rows.map((r) => [r.step_id, r.run === null ? null : Number(r.run)] as const));
  const compensated = new Set(
    flow.steps
      .filter((s) => s.stepId.startsWith(COMPENSATE) && s.status === 'completed')
      .map((s) => s.stepId.slice(COMPENSATE.length)),
  );
  return {
    ...flow,
    steps: flow.steps.map((s) => {
      const run = runOf.get(s.stepId) ?? null;
      return {
        ...s,
        run,
        compensation: s.stepId.startsWith(COMPENSATE),
        memoized: run === null ? null : s.status === 'completed' && run < flow.runs,
        retried: s.attempts > 1,
        compensated: compensated.has(s.stepId),
      };
    }),
  };
}
