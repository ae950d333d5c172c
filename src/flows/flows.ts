import { randomUUID } from 'node:crypto';
import { sleep } from '../core/backoff.js';
import { type Clock, systemClock } from '../core/clock.js';
import { type Duration, toMs } from '../core/duration.js';
import { InvalidArgumentError, OncelyError } from '../core/errors.js';
import { fingerprint } from '../core/fingerprint.js';
import { keyFrom, validateKey } from '../core/key.js';
import { type ObserveOptions, Observer } from '../core/observer.js';
import { endSpan, startSpan, tracingReady, withSpan } from '../core/tracing.js';
import type { Db, Sql } from '../db/types.js';
import type { TestHooks } from '../engine/hooks.js';
import { resolveOptions } from '../engine/options.js';
import { logFailure } from '../host/failure-log.js';
import { type Claim, type Statement, WorkQueue } from '../work/index.js';
import type { AnyFlow, FlowDefinition } from './define.js';
import { type ExecutionOutcome, executeFlow, KEPT_FAILURES } from './replay.js';
import * as q from './sql.js';
import { FLOW_WORK, JUST_STARTED, migrateFlowTables, runnable } from './tables.js';

/**
 * Options of `createFlows`. The observe options (`logger`, `onDecision`, `metrics`, `tracer`) are
 * createOncely's: flows count `oncely_flows_total`, `oncely_flow_steps_total` and
 * `oncely_compensations_total`, span each run (`oncely.flow`) and step (`oncely.step`), and
 * report the decisions `flow_failed`, `step_retried` and `compensation_failed`.
 */
export interface FlowsOptions extends ObserveOptions {
  /** Where flows, steps and signals live: `openDb(path | url)`. */
  db: Db;
  flows: readonly AnyFlow[];
  /** Flows this process runs at once. Default 16. */
  concurrency?: number;
  /** How long a claim holds without renewal; a dead worker's flows are taken over after it. Default '30s'. */
  lease?: Duration;
  /** How often an idle worker looks for work. Default '200ms'. */
  poll?: Duration;
  /**
   * Largest result a step (or the flow) may store, in bytes of JSON: over it, the step fails with
   * RESULT_TOO_LARGE, stored as the engine stores it (the effect happened: a retry does not run it
   * again). Default the engine's, 1 MiB.
   */
  maxResultBytes?: number;
  /** What starts, leases and due times are judged by (a test's manual clock); timers stay real. Default the system clock. */
  clock?: Clock;
  /**
   * Test only (oncely/testing's crash windows): called at each window of each step that runs
   * ('claimed', 'before-effect', 'after-effect', 'completed'), as the engine's `hooks` are, with
   * `action` `<flow>/<step id>` and `key` the step's idempotency key. Absent in production.
   */
  hooks?: TestHooks;
}

/** A flow as stored, for `list`, `show` and `result`. */
export interface FlowRecord {
  workflowId: string;
  name: string;
  bizId: string;
  status: 'pending' | 'running' | 'waiting' | 'completed' | 'failed' | 'cancelled';
  input: unknown;
  result: unknown;
  error: { name: string; message: string; code: string } | null;
  runs: number;
  createdAt: number;
  updatedAt: number;
}

interface FlowRow {
  workflow_id: string;
  name: string;
  biz_id: string;
  input: string;
  input_hash: string;
  status: FlowRecord['status'];
  result: string | null;
  error: string | null;
  runs: number | string;
  created_at: number | string;
  updated_at: number | string;
}

function toRecord(row: FlowRow): FlowRecord {
  return {
    workflowId: row.workflow_id,
    name: row.name,
    bizId: row.biz_id,
    status: row.status,
    input: JSON.parse(row.input),
    result: row.result === null ? null : JSON.parse(row.result),
    error: row.error === null ? null : JSON.parse(row.error),
    runs: Number(row.runs),
    createdAt: Number(row.created_at),
    updatedAt: Number(row.updated_at),
  };
}

const all = <R>(sql: Sql, { text, values }: Statement) => sql.all<R>(text, values);
const run = (sql: Sql, { text, values }: Statement) => sql.run(text, values);

/** What a run recorded: the flow's new status, or nothing (`lease_lost`: its claim was fenced off, or it stopped for a new holder). */
type RunRecorded = 'completed' | 'failed' | 'waiting' | 'lease_lost';

/** A claimed flow, as the claim returns it. */
type ClaimedFlow = Pick<FlowRow, 'workflow_id' | 'name' | 'input'> & { trace_id: string | null };

/** A flow's trace id; a flow started before trace ids were kept is traced by its workflow id. */
const traceOf = (row: ClaimedFlow): string => row.trace_id ?? row.workflow_id;

/**
 * Durable flows on a database: started once per business id, run by any worker process, resumed
 * after a crash from their last completed step.
 * @example const flows = await createFlows({ db, flows: [postprocess] }); await flows.startWorker(); await flows.start(postprocess, input)
 */
export class Flows {
  private readonly observer: Observer;
  private readonly byName = new Map<string, AnyFlow>();
  private readonly work: WorkQueue<ClaimedFlow>;
  private readonly clock: Clock;
  private readonly pollMs: number;
  private readonly concurrency: number;
  private readonly maxResultBytes: number;
  private readonly running = new Map<string, Promise<void>>();
  // The claim each running flow writes under: a newer claim of a flow already running here replaces it.
  private readonly claims = new Map<string, Claim<ClaimedFlow>>();
  private working = false;
  private loop: Promise<void> | undefined;
  private wake: (() => void) | undefined;

  constructor(private readonly options: FlowsOptions) {
    for (const flow of options.flows) this.byName.set(flow.name, flow);
    this.clock = options.clock ?? systemClock;
    this.work = new WorkQueue(options.db, FLOW_WORK, {
      leaseMs: toMs(options.lease ?? '30s', 'lease'),
      clock: this.clock,
    });
    this.pollMs = toMs(options.poll ?? '200ms', 'poll');
    this.concurrency = options.concurrency ?? 16;
    // The engine's default and check: one cap for every stored result.
    this.maxResultBytes = resolveOptions({ maxResultBytes: options.maxResultBytes }).maxResultBytes;
    this.observer = new Observer(options);
  }

  /**
   * Starts a flow for the business id its seed fields give, unless it exists: then returns it with
   * `already: true`. Another input under the same business id is FLOW_INPUT_MISMATCH. With `tx`
   * (a host handler's transaction) the start commits with the caller's writes; it is counted
   * `started` when its row is written, so a caller's transaction that rolls back still counted it.
   * `traceId` is the intent's (a host handler's or consumer's); its runs and steps carry it.
   * Default: a new one.
   */
  async start<I>(
    flow: FlowDefinition<I, unknown>,
    input: I,
    options: { tx?: Sql; traceId?: string } = {},
  ): Promise<{ workflowId: string; already: boolean }> {
    const values = flow.seed.map((field) => {
      const value = (input as Record<string, unknown>)?.[field];
      if (typeof value !== 'string' && typeof value !== 'number')
        throw new OncelyError('KEY_REQUIRED', `flow ${flow.name}: seed field ${field} is missing from the input`);
      return value;
    });
    const bizId = keyFrom(...values);
    const workflowId = validateKey(`${flow.name}-${bizId}`);
    const hash = fingerprint(input);
    const now = this.clock.now();
    const sql = options.tx ?? this.options.db;
    const traceId = options.traceId ?? randomUUID();
    const created = await run(
      sql,
      q.insertFlow(workflowId, flow.name, bizId, JSON.stringify(input), hash, now, traceId),
    );
    if (created === 0) {
      const [row] = await all<{ input_hash: string }>(sql, q.readInputHash(workflowId));
      if (row && row.input_hash !== hash)
        throw new OncelyError(
          'FLOW_INPUT_MISMATCH',
          `flow ${workflowId} was started with another input under the same seed (${flow.seed.join(', ')})`,
        );
      this.observer.metrics.add('oncely_flows_total', [flow.name, 'already']);
      // A start that found its run is a duplicate of the same intent, stopped before any step ran.
      this.observer.metrics.add('oncely_duplicates_total', ['flow_start', flow.name, 'true']);
      return { workflowId, already: true };
    }
    this.observer.metrics.add('oncely_flows_total', [flow.name, 'started']);
    // Started here with room to run: run it now rather than after the next poll.
    if (!options.tx && this.working && this.running.size < this.concurrency) await this.claimOne(workflowId);
    else this.wake?.();
    return { workflowId, already: false };
  }

  /** Delivers a signal to a flow (NOT_FOUND if there is none); a signal id seen before is ignored. Returns whether it was new. */
  async signal(workflowId: string, name: string, payload: unknown, options: { signalId: string }): Promise<boolean> {
    validateKey(options?.signalId);
    const now = this.clock.now();
    const created = await this.options.db.transaction(async (tx) => {
      // The flow's row first: a worker deciding to wait then reads this signal, or waits for this
      // transaction and is woken by it (without the lock, both could miss each other and the flow
      // would wait for good). SQLite's transactions are serial already.
      const [flow] = await all(tx, q.lockFlow(tx.dialect, workflowId));
      if (!flow) throw new OncelyError('NOT_FOUND', `no flow ${workflowId} to signal`);
      const inserted = await run(
        tx,
        q.insertSignal(workflowId, options.signalId, name, JSON.stringify(payload ?? null), now),
      );
      if (inserted === 1) await run(tx, q.wakeWaiting(workflowId, now));
      return inserted === 1;
    });
    this.wake?.();
    return created;
  }

  /** Waits until the flow completes (its value) or fails (FLOW_FAILED); TIMEOUT after `timeout`. */
  async result(workflowId: string, options: { timeout?: Duration } = {}): Promise<unknown> {
    const deadline = Date.now() + toMs(options.timeout ?? '60s', 'timeout');
    for (let poll = 2; ; poll = Math.min(poll * 2, 100)) {
      await this.running.get(workflowId);
      const flow = await this.get(workflowId);
      if (!flow) throw new OncelyError('NOT_FOUND', `no flow ${workflowId}`);
      if (flow.status === 'completed') return flow.result;
      if (flow.status === 'failed')
        throw new OncelyError('FLOW_FAILED', `flow ${workflowId} failed: ${flow.error?.message}`);
      if (flow.status === 'cancelled') throw new OncelyError('FLOW_CANCELLED', `flow ${workflowId} was cancelled`);
      if (Date.now() > deadline) throw new OncelyError('TIMEOUT', `flow ${workflowId} is ${flow.status}`);
      await sleep(poll);
    }
  }

  /** One flow, or null. */
  async get(workflowId: string): Promise<FlowRecord | null> {
    const [row] = await all<FlowRow>(this.options.db, q.readFlow(workflowId));
    return row ? toRecord(row) : null;
  }

  /** Flows, newest first, optionally of one status. */
  async list(options: { status?: FlowRecord['status']; limit?: number } = {}): Promise<FlowRecord[]> {
    const limit = Math.min(Math.max(1, options.limit ?? 100), 10_000);
    const rows = await all<FlowRow>(this.options.db, q.listFlows(options.status, limit));
    return rows.map(toRecord);
  }

  /**
   * A flow with its steps and signals (who approved, and when). A step's `attempts` count every
   * try, one a crash cut short included; its `error` is its last failed try's (on a completed step,
   * why it was tried again: a run that ended mid-step is LEASE_LOST naming that run).
   */
  async show(workflowId: string) {
    const flow = await this.get(workflowId);
    if (!flow) return null;
    const steps = await all<{
      step_id: string;
      status: string;
      result: string | null;
      error: string | null;
      attempts: number;
      run: number | string | null;
      started_at: number | string;
      completed_at: number | string | null;
    }>(this.options.db, q.listSteps(workflowId));
    const signals = await all<{
      signal_id: string;
      name: string;
      payload: string;
      received_at: number | string;
      seq: number | string | null;
    }>(this.options.db, q.listSignals(workflowId));
    return {
      ...flow,
      steps: steps.map((s) => ({
        stepId: s.step_id,
        status: s.status,
        result: s.result === null ? null : JSON.parse(s.result),
        error: s.error === null ? null : JSON.parse(s.error),
        attempts: Number(s.attempts),
        // The run (the flow's claim count) that last wrote the step: its outcome's, or the attempt's in flight.
        run: s.run === null ? null : Number(s.run),
        startedAt: Number(s.started_at),
        completedAt: s.completed_at === null ? null : Number(s.completed_at),
      })),
      signals: signals.map((s) => ({
        signalId: s.signal_id,
        name: s.name,
        payload: JSON.parse(s.payload),
        receivedAt: Number(s.received_at),
        // The signal's place among the flow's signals, as waits take them (1 for the first delivered).
        seq: Number(s.seq),
      })),
    };
  }

  /**
   * Resumes a failed flow from its failed step (completed steps are not run again). A step whose
   * effect happened but whose result could not be stored (RESULT_NOT_SERIALIZABLE,
   * RESULT_TOO_LARGE) stays failed: the retry answers its failure and does not run it again.
   */
  async retry(workflowId: string): Promise<boolean> {
    const now = this.clock.now();
    const resumed = await this.options.db.transaction(async (tx) => {
      const changed = await run(tx, q.retryFailed(workflowId, now));
      if (changed === 1)
        for (const step of await all<{ step_id: string; error: string | null }>(tx, q.failedSteps(workflowId)))
          if (!KEPT_FAILURES.has((JSON.parse(step.error ?? '{}') as { code?: string }).code ?? ''))
            await run(tx, q.deleteStep(workflowId, step.step_id));
      return changed === 1;
    });
    this.wake?.();
    return resumed;
  }

  /**
   * Cancels a flow no worker holds (pending, or waiting for a signal or a time): it never runs
   * again, and its completed steps are not compensated. Answers false when it is running or
   * finished. The status in the WHERE is the guard: a claim that took the flow first makes this
   * change nothing, and a claim after it finds the flow no longer runnable; the fence moves on
   * too, so no holder's write of an earlier claim can apply.
   */
  async cancel(workflowId: string): Promise<boolean> {
    const changed = await run(this.options.db, {
      text: `UPDATE oncely_flows SET status = 'cancelled', wake_at = NULL, fence = fence + 1, updated_at = ?
        WHERE workflow_id = ? AND status IN ('pending', 'waiting')`,
      values: [this.clock.now(), workflowId],
    });
    return changed === 1;
  }

  /** Runs flows in this process until `stop()`. */
  async startWorker(): Promise<void> {
    if (this.working) return;
    this.working = true;
    this.loop = this.poll();
  }

  /** Stops claiming, and waits for the flows in flight to finish or suspend. */
  async stop(): Promise<void> {
    this.working = false;
    this.wake?.();
    await this.loop;
    await Promise.all(this.running.values());
  }

  /** Stops the worker and closes the database. */
  async close(): Promise<void> {
    await this.stop();
    await this.options.db.close();
  }

  private async poll(): Promise<void> {
    while (this.working) {
      const room = this.concurrency - this.running.size;
      let claimed = 0;
      if (room > 0) claimed = await this.claim(room).catch(() => 0);
      if (claimed === 0 || this.running.size >= this.concurrency)
        await new Promise<void>((resolve) => {
          const timer = setTimeout(resolve, this.pollMs);
          this.wake = () => {
            clearTimeout(timer);
            resolve();
          };
        });
    }
  }

  /** Claims up to `n` runnable flows this process knows and runs them. */
  private async claim(n: number): Promise<number> {
    const names = [...this.byName.keys()];
    if (names.length === 0) return 0;
    const claims = await this.work.claim(n, runnable(names, this.clock.now()));
    for (const claim of claims) this.launch(claim);
    return claims.length;
  }

  /** Claims one just-started flow for this process. */
  private async claimOne(workflowId: string): Promise<void> {
    const claim = await this.work.claimRow([workflowId], JUST_STARTED);
    if (claim) this.launch(claim);
  }

  private launch(claim: Claim<ClaimedFlow>): void {
    const { row } = claim;
    const flow = this.byName.get(row.name);
    if (!flow) return;
    const current = this.claims.get(row.workflow_id);
    // Already running here (this process stalled past its lease and claimed it again): one run is
    // enough, and it carries on under the newer claim.
    if (current) {
      current.fence = claim.fence;
      return;
    }
    this.claims.set(row.workflow_id, claim);
    // A database error while recording the outcome leaves the flow claimed; its lease lapses and a
    // worker runs it again from its stored steps, so the error must not take the process down.
    const done = this.runFlow(flow, claim)
      .catch(() => undefined)
      .finally(() => {
        this.running.delete(row.workflow_id);
        this.claims.delete(row.workflow_id);
        this.wake?.();
      });
    this.running.set(row.workflow_id, done);
  }

  /** Runs a claimed flow in its span (`oncely.flow`), its steps' spans as children. */
  private async runFlow(flow: AnyFlow, claim: Claim<ClaimedFlow>): Promise<void> {
    const tracer = this.observer.activeTracer;
    const span = tracer
      ? startSpan(tracer, 'oncely.flow', {
          'oncely.flow': flow.name,
          'oncely.workflow_id': claim.row.workflow_id,
          'oncely.trace_id': traceOf(claim.row),
          'oncely.attempt': claim.attempts,
          'oncely.fence': claim.fence,
        })
      : undefined;
    try {
      const recorded = await withSpan(span, () => this.execute(flow, claim));
      endSpan(span, { 'oncely.outcome': recorded });
    } catch (error) {
      // The database failed while recording: the run is left to its lease.
      endSpan(span, { 'oncely.outcome': 'store_unavailable' }, error);
      throw error;
    }
  }

  /** One run of a claimed flow, and its outcome recorded under the claim; answers what was recorded. */
  private async execute(flow: AnyFlow, claim: Claim<ClaimedFlow>): Promise<RunRecorded> {
    const db = this.options.db;
    const id = claim.row.workflow_id;
    const { metrics } = this.observer;
    // Renewed on the process's one renewal timer; a refused renewal means another worker took it over.
    const held = this.work.keep(claim);
    let outcome: ExecutionOutcome;
    try {
      const hooks = this.options.hooks;
      outcome = await executeFlow(
        db,
        flow,
        id,
        JSON.parse(claim.row.input),
        () => held.holds(),
        this.observer,
        this.maxResultBytes,
        // The claim's fence may move on (this process claimed the flow again): read it at each window.
        hooks && { at: hooks, fence: () => claim.fence },
        traceOf(claim.row),
      );
    } finally {
      held.stop();
    }
    // Counted when this claim's write won: a fenced-off run's outcome is not the flow's.
    if (outcome.status === 'completed') {
      if (!(await this.work.complete(db, claim, 'completed', { result: JSON.stringify(outcome.result) })))
        return 'lease_lost';
      metrics.add('oncely_flows_total', [flow.name, 'completed']);
      return 'completed';
    }
    if (outcome.status === 'failed') {
      if (!(await this.work.complete(db, claim, 'failed', { error: JSON.stringify(outcome.error) })))
        return 'lease_lost';
      metrics.add('oncely_flows_total', [flow.name, 'failed']);
      // Never silent: with a logger the decision below is the line; without one, a line on stderr.
      if (!this.options.logger)
        logFailure(
          undefined,
          'flow failed',
          `flow ${id}, run ${claim.attempts}; oncely flows retry ${id} resumes it`,
          {},
          Object.assign(new Error(outcome.error.message), { name: outcome.error.name, code: outcome.error.code }),
        );
      if (this.observer.listening)
        this.observer.decide({
          decision: 'flow_failed',
          surface: 'flow',
          action: flow.name,
          key: id,
          fence: claim.fence,
          attempt: claim.attempts,
          traceId: traceOf(claim.row),
          error: { code: outcome.error.code, message: outcome.error.message },
          detail: { workflowId: id },
        });
      return 'failed';
    }
    if (outcome.reason === 'lease_lost') return 'lease_lost';
    const { wakeAt } = outcome;
    // A signal may have arrived while this run was deciding to wait: it stays runnable then.
    return db.transaction(async (tx) => {
      if (!(await this.work.complete(tx, claim, 'waiting', { wake_at: wakeAt }))) return 'lease_lost';
      // Runnable when a wait it stopped at has its signal: the n-th wait for a name takes the n-th
      // signal of that name. Signals of other names, or already taken, must not wake it (a wake
      // would only suspend again, and set it pending again, in a loop).
      const waits = await all<{ step_id: string }>(tx, q.waitingSteps(id));
      const counts = await all<{ name: string; n: number | string }>(tx, q.signalCounts(id));
      const received = new Map(counts.map((c) => [c.name, Number(c.n)]));
      const late = waits.some(({ step_id }) => {
        const wait = /^wait:(.*):(\d+)$/s.exec(step_id);
        return wait !== null && (received.get(wait[1] ?? '') ?? 0) >= Number(wait[2]);
      });
      if (late) await run(tx, q.wakeWaiting(id, null));
      return 'waiting';
    });
  }
}

/** Creates the tables and the flows API; call `startWorker()` in processes that run flows. */
export async function createFlows(options: FlowsOptions): Promise<Flows> {
  if (!options?.db) throw new InvalidArgumentError('createFlows needs { db }');
  // Spans start from the first run: the optional OpenTelemetry API has been looked for by then.
  await Promise.all([migrateFlowTables(options.db), tracingReady()]);
  return new Flows(options);
}
