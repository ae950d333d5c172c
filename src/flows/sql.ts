/**
 * The statements of flows, steps and signals, as pure functions returning text and values (`?`
 * placeholders on both dialects). Claims and completions of flow runs are the work module's.
 */
import type { Statement } from '../work/index.js';

type Dialect = 'sqlite' | 'postgres';

/** Starts a flow unless its id exists. */
export const insertFlow = (
  workflowId: string,
  name: string,
  bizId: string,
  input: string,
  inputHash: string,
  now: number,
  traceId: string,
): Statement => ({
  text: `INSERT INTO oncely_flows (workflow_id, name, biz_id, input, input_hash, status, created_at, updated_at, trace_id)
    VALUES (?, ?, ?, ?, ?, 'pending', ?, ?, ?) ON CONFLICT (workflow_id) DO NOTHING`,
  values: [workflowId, name, bizId, input, inputHash, now, now, traceId],
});

export const readInputHash = (workflowId: string): Statement => ({
  text: 'SELECT input_hash FROM oncely_flows WHERE workflow_id = ?',
  values: [workflowId],
});

/** The flow's row, locked on PostgreSQL until the transaction ends (SQLite's are serial already). */
export const lockFlow = (dialect: Dialect, workflowId: string): Statement => ({
  text: `SELECT workflow_id FROM oncely_flows WHERE workflow_id = ?${dialect === 'postgres' ? ' FOR UPDATE' : ''}`,
  values: [workflowId],
});

/**
 * A signal, numbered in the order of delivery: `seq` is one more than the flow's last, taken while
 * the caller holds the flow's row (lockFlow), so signals of one flow are numbered in the order
 * they commit, whatever the delivering processes' clocks say (`received_at` is only shown).
 */
export const insertSignal = (
  workflowId: string,
  signalId: string,
  name: string,
  payload: string,
  now: number,
): Statement => ({
  text: `INSERT INTO oncely_flow_signals (workflow_id, signal_id, name, payload, received_at, seq)
    VALUES (?, ?, ?, ?, ?, (SELECT COALESCE(MAX(seq), 0) + 1 FROM oncely_flow_signals WHERE workflow_id = ?))
    ON CONFLICT (workflow_id, signal_id) DO NOTHING`,
  values: [workflowId, signalId, name, payload, now, workflowId],
});

/** Makes a waiting flow runnable (a signal came); `now` is its updated_at, or null to keep it. */
export const wakeWaiting = (workflowId: string, now: number | null): Statement =>
  now === null
    ? {
        text: `UPDATE oncely_flows SET status = 'pending' WHERE workflow_id = ? AND status = 'waiting'`,
        values: [workflowId],
      }
    : {
        text: `UPDATE oncely_flows SET status = 'pending', wake_at = NULL, updated_at = ? WHERE workflow_id = ? AND status = 'waiting'`,
        values: [now, workflowId],
      };

export const readFlow = (workflowId: string): Statement => ({
  text: 'SELECT * FROM oncely_flows WHERE workflow_id = ?',
  values: [workflowId],
});

/** Flows, newest first, optionally of one status. */
export const listFlows = (status: string | undefined, limit: number): Statement =>
  status
    ? { text: 'SELECT * FROM oncely_flows WHERE status = ? ORDER BY created_at DESC LIMIT ?', values: [status, limit] }
    : { text: 'SELECT * FROM oncely_flows ORDER BY created_at DESC LIMIT ?', values: [limit] };

export const listSteps = (workflowId: string): Statement => ({
  text: `SELECT step_id, status, result, error, attempts, run, started_at, completed_at FROM oncely_flow_steps
    WHERE workflow_id = ? ORDER BY started_at, step_id`,
  values: [workflowId],
});

export const listSignals = (workflowId: string): Statement => ({
  text: 'SELECT signal_id, name, payload, received_at, seq FROM oncely_flow_signals WHERE workflow_id = ? ORDER BY seq',
  values: [workflowId],
});

/** A failed flow made runnable again. */
export const retryFailed = (workflowId: string, now: number): Statement => ({
  text: `UPDATE oncely_flows SET status = 'pending', error = NULL, lease_owner = NULL, updated_at = ?
    WHERE workflow_id = ? AND status = 'failed'`,
  values: [now, workflowId],
});

export const failedSteps = (workflowId: string): Statement => ({
  text: `SELECT step_id, error FROM oncely_flow_steps WHERE workflow_id = ? AND status = 'failed'`,
  values: [workflowId],
});

export const deleteStep = (workflowId: string, stepId: string): Statement => ({
  text: 'DELETE FROM oncely_flow_steps WHERE workflow_id = ? AND step_id = ?',
  values: [workflowId, stepId],
});

export const waitingSteps = (workflowId: string): Statement => ({
  text: `SELECT step_id FROM oncely_flow_steps WHERE workflow_id = ? AND status = 'waiting'`,
  values: [workflowId],
});

export const signalCounts = (workflowId: string): Statement => ({
  text: 'SELECT name, COUNT(*) AS n FROM oncely_flow_signals WHERE workflow_id = ? GROUP BY name',
  values: [workflowId],
});

/** One step's memo. */
export const readStep = (workflowId: string, stepId: string): Statement => ({
  text: 'SELECT status, result, error, attempts, run, started_at FROM oncely_flow_steps WHERE workflow_id = ? AND step_id = ?',
  values: [workflowId, stepId],
});

/** Every step's memo of a flow. */
export const readSteps = (workflowId: string): Statement => ({
  text: 'SELECT step_id, status, result, error, attempts, run, started_at FROM oncely_flow_steps WHERE workflow_id = ?',
  values: [workflowId],
});

/**
 * An attempt of a step begins: the step's row is written (attempt 1) or its attempts counted on
 * (the row is still `running`: an earlier attempt failed, or the run that made it ended), with
 * `error` why the previous attempt ended. Answers the attempt's number, or no row when the step was
 * finished meanwhile (by a run that lost its lease). `run` is the flow's claim count as it starts.
 */
export const startStep = (workflowId: string, stepId: string, error: string | null, now: number): Statement => ({
  text: `INSERT INTO oncely_flow_steps (workflow_id, step_id, status, error, attempts, started_at, run)
    VALUES (?, ?, 'running', ?, 1, ?, (SELECT runs FROM oncely_flows WHERE workflow_id = ?))
    ON CONFLICT (workflow_id, step_id) DO UPDATE
    SET attempts = oncely_flow_steps.attempts + 1, error = excluded.error, run = excluded.run
    WHERE oncely_flow_steps.status = 'running'
    RETURNING attempts`,
  values: [workflowId, stepId, error, now, workflowId],
});

/**
 * A step's outcome; the first writer wins (the step is no longer `running` for the second). The
 * status is written in the text (from a closed set), so each outcome is one prepared statement.
 * `error` null keeps the last failed attempt's error (a completed step says why it was retried).
 * `run` is the flow's claim count as the outcome is written (one statement, no extra round trip).
 */
export const finishStep = (
  workflowId: string,
  stepId: string,
  status: 'completed' | 'failed',
  result: string | null,
  error: string | null,
  now: number,
): Statement => ({
  text: `UPDATE oncely_flow_steps SET status = '${status}', result = ?, error = COALESCE(?, error), completed_at = ?,
    run = (SELECT runs FROM oncely_flows WHERE workflow_id = ?)
    WHERE workflow_id = ? AND step_id = ? AND status = 'running'`,
  values: [result, error, now, workflowId, workflowId, stepId],
});

/** A wait's start, so its deadline is the same on every replay. */
export const insertWait = (workflowId: string, stepId: string, now: number): Statement => ({
  text: `INSERT INTO oncely_flow_steps (workflow_id, step_id, status, attempts, started_at) VALUES (?, ?, 'waiting', 0, ?)
    ON CONFLICT (workflow_id, step_id) DO NOTHING`,
  values: [workflowId, stepId, now],
});

/** The n-th signal (from 0) of a name, in the order of delivery. */
export const nthSignal = (workflowId: string, name: string, n: number): Statement => ({
  text: `SELECT payload FROM oncely_flow_signals WHERE workflow_id = ? AND name = ? ORDER BY seq LIMIT 1 OFFSET ?`,
  values: [workflowId, name, n],
});

export const completeWait = (workflowId: string, stepId: string, result: string, now: number): Statement => ({
  text: `UPDATE oncely_flow_steps SET status = 'completed', result = ?, completed_at = ?
    WHERE workflow_id = ? AND step_id = ? AND status = 'waiting'`,
  values: [result, now, workflowId, stepId],
});
