import { randomUUID } from 'node:crypto';
import { type Duration, toMs } from '../core/duration.js';
import { InvalidArgumentError, OncelyError } from '../core/errors.js';
import { fingerprint } from '../core/fingerprint.js';
import { keyFrom, validateKey } from '../core/key.js';
import { type ObserveOptions, Observer } from '../core/observer.js';
import { endSpan, startSpan, tracingReady, withSpan } from '../core/tracing.js';
import type { Db } from '../db/types.js';
import type { Oncely } from '../engine/engine.js';
import {
  type Approval,
  decideApproval,
  expireIfDue,
  getApproval,
  listApprovals,
  requestApproval,
} from './approvals.js';
import { Credits } from './credits.js';
import {
  approvalEnvelope,
  type DeliveryState,
  envelopeOf,
  failedEnvelope,
  type ToolEnvelope,
  withApproval,
} from './envelope.js';
import { actionIdOf, checkIds, keyParts, toolAction } from './keys.js';
import { migrateAgentTables } from './tables.js';
import type { AnyTool, EffectTool, ReadTool } from './tool.js';

/**
 * Options of `createAgentRuntime`. The observe options (`logger`, `onDecision`, `metrics`,
 * `tracer`) are createOncely's: the runtime counts `oncely_tool_calls_total` (each envelope's
 * delivery state), `oncely_approvals_total`, `oncely_credits_total` and the credits a failed call
 * gives back (`oncely_compensations_total`, surface tool), and spans each call
 * (`oncely.tool`, the engine's span its child). Give the engine (`once`) the same ones: it counts
 * and logs the tool calls' engine runs (surface `tool`).
 */
export interface AgentRuntimeOptions extends ObserveOptions {
  /** The engine that claims each intent (any store: SQLite, PostgreSQL, Redis). */
  once: Oncely;
  /** Where approvals and credits live: `openDb(path | url)`. */
  db: Db;
  tools: readonly AnyTool[];
  /** Tenant of calls that name none. Default 'default'. */
  tenant?: string;
  /** How long a parallel duplicate waits for the first call's outcome. Default '30s'. */
  wait?: Duration;
  /** How long a reservation survives a holder that vanished, before the sweep releases it. Default '15m'. */
  reservationTtl?: Duration;
}

/** Options of one call. */
export interface CallOptions {
  tenant?: string;
  /** A key the client supplies (MCP `_meta`), used instead of the declared key fields. */
  key?: string;
  /** The intent's trace id, made where the intent began and the same on its retries; the first claim keeps it. */
  traceId?: string;
  /** This attempt's id (the envelope's `requestId`); default a new UUID. */
  requestId?: string;
}

/** Who decides an approval, and the ids of the decision's call (as in CallOptions). */
export interface Decider {
  approver: string;
  traceId?: string;
  requestId?: string;
}

/** What a runtime operation learned as it went: the tool it was about (a label: '' until known). */
interface Tracked {
  tool: string;
}

const DEFAULT_APPROVAL_TTL = '24h';

/**
 * Runs tools so that any model may call them any number of times: one execution per intent, one
 * reservation per action, approvals bound to the exact content shown.
 * @example const agent = await createAgentRuntime({ once, db, tools: [sendReviewNotice] }); await agent.call('sendReviewNotice', args)
 */
export class AgentRuntime {
  /** The credit ledger: `grant`, `balance`, `sweep`. */
  readonly credits: Credits;
  private readonly tools = new Map<string, AnyTool>();
  private readonly tenant: string;
  private readonly waitMs: number;
  private readonly reservationMs: number;
  private readonly observer: Observer;

  constructor(private readonly options: AgentRuntimeOptions) {
    for (const tool of options.tools) {
      if (this.tools.has(tool.name)) throw new InvalidArgumentError(`two tools are named ${tool.name}`);
      this.tools.set(tool.name, tool);
      // Under the action its calls run as (see execute): `once.reconcile` asks it about their unknown records.
      if (!tool.readOnly && tool.reconcile)
        options.once.registerReconcile(toolAction(tool.name), tool.reconcile, tool.idempotency.ttl);
    }
    this.observer = new Observer(options);
    this.credits = new Credits(options.db, this.observer.metrics);
    this.tenant = options.tenant ?? 'default';
    this.waitMs = toMs(options.wait ?? '30s', 'wait');
    this.reservationMs = toMs(options.reservationTtl ?? '15m', 'reservationTtl');
  }

  /**
   * Calls a tool; always answers with an envelope, never throws for the model's mistakes (a bad
   * `traceId` or `requestId` is the caller's: TRACE_ID_INVALID).
   */
  async call(name: string, raw: unknown, options: CallOptions = {}): Promise<ToolEnvelope> {
    checkIds(options);
    return this.observed('call', options.requestId, (track, requestId) =>
      this.callTool(track, requestId, name, raw, options),
    );
  }

  private async callTool(
    track: Tracked,
    requestId: string,
    name: string,
    raw: unknown,
    options: CallOptions,
  ): Promise<ToolEnvelope> {
    const tool = this.tools.get(name);
    if (!tool) return failedEnvelope(requestId, 'TOOL_UNKNOWN', `there is no tool named ${name}`);
    track.tool = tool.name;
    const checked = await tool.input['~standard'].validate(raw);
    const tenant = options.tenant ?? this.tenant;
    if (checked.issues)
      return failedEnvelope(
        requestId,
        'INPUT_INVALID',
        `fix the input and call again: ${checked.issues.map((i) => `${(i.path ?? []).join('.')} ${i.message}`.trim()).join('; ')}`,
      );
    const input = checked.value as Record<string, unknown>;
    if (tool.readOnly) return this.read(tool, input, tenant, requestId, options);
    let key: string;
    try {
      key =
        options.key !== undefined
          ? keyFrom(tool.name, validateKey(options.key))
          : keyFrom(tool.name, ...keyParts(tool, input));
    } catch (error) {
      return failedEnvelope(
        requestId,
        (error as OncelyError).code ?? 'KEY_INVALID',
        `${(error as Error).message}; the key fields are ${tool.idempotency.keyFields.join(', ')}`,
      );
    }
    const actionId = actionIdOf(tool, tenant, key, input);
    if (tool.outbound?.approval === 'required') {
      const preview = tool.outbound.preview(input as never);
      const now = Date.now();
      const requested = await requestApproval(this.options.db, {
        id: actionId,
        tenant,
        tool: tool.name,
        idempotencyKey: key,
        contentHash: fingerprint(preview),
        input,
        preview,
        requestedAt: now,
        expiresAt: now + toMs(tool.outbound.approvalTtl ?? DEFAULT_APPROVAL_TTL, 'approvalTtl'),
      });
      let { approval } = requested;
      if (requested.created) this.countApproval(tool.name, 'requested');
      // A pending approval past its time can never be approved: record the expiry rather than say "wait".
      if (approval.status === 'pending' && approval.expiresAt <= now) {
        const due = await expireIfDue(this.options.db, approval.id, now);
        if (due.expired) this.countApproval(tool.name, 'expired');
        approval = due.approval ?? approval;
      }
      if (approval.contentHash !== fingerprint(preview))
        return withApproval(
          failedEnvelope(
            requestId,
            'APPROVAL_CONTENT_CHANGED',
            'this intent is awaiting approval of other content; the approved content is the only one that can be sent',
            { key, actionId },
          ),
          approval,
        );
      if (approval.status !== 'approved') return approvalEnvelope(approval, requestId, key, actionId);
      return withApproval(
        await this.execute(tool, approval.input as Record<string, unknown>, key, tenant, actionId, requestId, options),
        approval,
      );
    }
    return this.execute(tool, input, key, tenant, actionId, requestId, options);
  }

  /** Approves a pending approval and executes exactly the content that was previewed, once. */
  async approve(approvalId: string, by: Decider): Promise<ToolEnvelope> {
    if (!by?.approver) throw new InvalidArgumentError('approve needs { approver }');
    checkIds(by);
    return this.observed('approve', by.requestId, (track, requestId) =>
      this.approveTool(track, requestId, approvalId, by),
    );
  }

  private async approveTool(track: Tracked, requestId: string, approvalId: string, by: Decider): Promise<ToolEnvelope> {
    const { approval, decided } = await decideApproval(this.options.db, approvalId, 'approved', by.approver, null);
    if (!approval) return failedEnvelope(requestId, 'APPROVAL_UNKNOWN', `no approval ${approvalId}`);
    const tool = this.tools.get(approval.tool);
    if (!tool || tool.readOnly)
      return failedEnvelope(requestId, 'TOOL_UNKNOWN', `approval ${approvalId} is for unknown tool ${approval.tool}`);
    track.tool = tool.name;
    if (decided) this.countApproval(tool.name, decided);
    if (approval.status !== 'approved')
      return approvalEnvelope(approval, requestId, approval.idempotencyKey, approval.id);
    // Approving twice finds the first execution's record: already_sent, nothing sent again.
    return withApproval(
      await this.execute(
        tool,
        approval.input as Record<string, unknown>,
        approval.idempotencyKey,
        approval.tenant,
        approval.id,
        requestId,
        by,
      ),
      approval,
    );
  }

  /** Rejects a pending approval; who and when are kept. */
  async reject(approvalId: string, by: Decider & { reason?: string }): Promise<ToolEnvelope> {
    checkIds(by);
    return this.observed('reject', by.requestId, async (track, requestId) => {
      const { approval, decided } = await decideApproval(
        this.options.db,
        approvalId,
        'rejected',
        by.approver,
        by.reason ?? null,
      );
      if (!approval) return failedEnvelope(requestId, 'APPROVAL_UNKNOWN', `no approval ${approvalId}`);
      // A label only for tools this runtime declares: a stored name is not a bounded label value otherwise.
      if (this.tools.has(approval.tool)) track.tool = approval.tool;
      if (decided) this.countApproval(track.tool, decided);
      return approvalEnvelope(approval, requestId, approval.idempotencyKey, approval.id);
    });
  }

  /** Reads an approval. */
  approval(id: string): Promise<Approval | null> {
    return getApproval(this.options.db, id);
  }

  /** Lists approvals, optionally by status. */
  approvals(status?: Approval['status']): Promise<Approval[]> {
    return listApprovals(this.options.db, status);
  }

  /**
   * Runs one operation (call, approve, reject) in its span, `oncely.tool`, and counts the delivery
   * state of the envelope it answers.
   */
  private async observed(
    operation: 'call' | 'approve' | 'reject',
    givenRequestId: string | undefined,
    run: (track: Tracked, requestId: string) => Promise<ToolEnvelope>,
  ): Promise<ToolEnvelope> {
    const requestId = givenRequestId ?? randomUUID();
    const track: Tracked = { tool: '' };
    const tracer = this.observer.activeTracer;
    const span = tracer
      ? startSpan(tracer, 'oncely.tool', { 'oncely.operation': operation, 'oncely.request_id': requestId })
      : undefined;
    let answer: ToolEnvelope;
    try {
      answer = await withSpan(span, () => run(track, requestId));
    } catch (error) {
      // The store of approvals or credits failed outside the engine's run.
      endSpan(span, { 'oncely.tool': track.tool }, error);
      throw error;
    }
    this.observer.metrics.add('oncely_tool_calls_total', [track.tool, answer.deliveryState]);
    if (span)
      endSpan(
        span,
        {
          'oncely.tool': track.tool,
          'oncely.state': answer.deliveryState,
          ...(answer.traceId ? { 'oncely.trace_id': answer.traceId } : {}),
        },
        answer.deliveryState === 'failed' ? answer.error : undefined,
      );
    return answer;
  }

  private countApproval(tool: string, decision: 'requested' | 'approved' | 'rejected' | 'expired'): void {
    this.observer.metrics.add('oncely_approvals_total', [tool, decision]);
  }
  /**
   * Gives a failed call's reserved credits back: the compensation of the four rates (surface
   * tool), counted succeeded or failed. A failed give-back throws: the reservation stays for the
   * sweep, and the caller sees why.
   */
  private async giveBack(actionId: string, tool: string): Promise<void> {
    try {
      await this.credits.release(actionId, tool);
    } catch (error) {
      this.observer.metrics.add('oncely_compensations_total', ['tool', tool, 'failed']);
      throw error;
    }
    this.observer.metrics.add('oncely_compensations_total', ['tool', tool, 'succeeded']);
  }

  /** Runs a read-only tool: no key, no record, no reservation. */
  private async read(
    tool: ReadTool,
    input: Record<string, unknown>,
    tenant: string,
    requestId: string,
    ids: { traceId?: string },
  ): Promise<ToolEnvelope> {
    const traceId = ids.traceId ?? randomUUID();
    const base = { key: null, actionId: null };
    try {
      const data = await tool.execute(input as never, { tenant, traceId, requestId });
      return { ...envelopeOf('read', requestId, base, traceId, 'read; nothing changed'), data };
    } catch (error) {
      const code = (error as { code?: unknown }).code;
      const text = error instanceof Error ? error.message : String(error);
      return {
        ...envelopeOf('failed', requestId, base, traceId, `failed: ${text}`),
        error: { code: typeof code === 'string' ? code : 'TOOL_FAILED', message: text },
      };
    }
  }

  /** The answer for an action charged before whose result is gone with its expired record. */
  private async chargedEarlier(
    base: { key: string; actionId: string },
    requestId: string,
    actionId: string,
    traceId: string | null,
  ): Promise<ToolEnvelope> {
    return {
      ...envelopeOf(
        'already_sent',
        requestId,
        base,
        traceId,
        'already sent and charged earlier; its result is no longer kept; do not send again',
      ),
      firstExecutedAt: await this.credits.chargedAt(actionId),
    };
  }

  private async execute(
    tool: EffectTool,
    input: Record<string, unknown>,
    key: string,
    tenant: string,
    actionId: string,
    requestId: string,
    ids: { traceId?: string },
  ): Promise<ToolEnvelope> {
    const fields = tool.idempotency.fingerprintFields ?? tool.idempotency.keyFields;
    const fingerprint = Object.fromEntries(fields.map((f) => [f, input[f]]));
    const base = { key, actionId };
    // The intent's trace id as this call learns it: the record's, from the run or the error about it.
    let traceId: string | null = null;
    // A charged action whose record expired answers at once, rather than every caller claiming the
    // key in turn only to find the charge (the check inside the run stays the one that decides).
    if (tool.cost && (await this.credits.chargedAt(actionId)) !== null) {
      const record = await this.options.once.get(toolAction(tool.name), key, { tenant });
      if (record?.state !== 'succeeded' || (record.expiresAt !== null && record.expiresAt <= Date.now()))
        return this.chargedEarlier(base, requestId, actionId, ids.traceId ?? record?.traceId ?? null);
    }
    try {
      const result = await this.options.once.run(
        {
          action: toolAction(tool.name),
          key,
          tenant,
          input: fingerprint,
          ttl: tool.idempotency.ttl,
          wait: this.waitMs,
          surface: 'tool',
          requestId,
          ...(ids.traceId !== undefined ? { traceId: ids.traceId } : {}),
        },
        async (ctx) => {
          traceId = ctx.traceId;
          const account = tool.cost?.account({ tenant });
          if (tool.cost && account) {
            const held = await this.credits.reserve(
              account,
              tool.cost.credits,
              actionId,
              Date.now() + this.reservationMs,
              ctx.traceId,
              tool.name,
            );
            // One action is charged once, ever: its record expired (or its holder died after the
            // charge), so it neither runs nor charges again. Thrown, the key is released: every
            // later call of the action gets this same answer.
            if (held === 'charged')
              throw new OncelyError('ACTION_CHARGED', `action ${actionId} was done and charged already`);
          }
          try {
            const data = await tool.execute(input as never, {
              idempotencyKey: key,
              actionId,
              tenant,
              traceId: ctx.traceId,
              requestId: ctx.requestId,
              attempt: ctx.attempt,
            });
            if (tool.cost && account) await this.credits.confirm(actionId, tool.name);
            return data;
          } catch (error) {
            if (tool.cost && account) await this.giveBack(actionId, tool.name);
            throw error;
          }
        },
      );
      const state: DeliveryState = result.replayed ? 'already_sent' : 'sent';
      const message = result.replayed ? 'already sent earlier: this is the first result; do not send again' : 'sent';
      return {
        ...envelopeOf(state, requestId, base, result.record.traceId, message),
        success: true,
        data: result.value,
        firstExecutedAt: result.record.completedAt,
      };
    } catch (error) {
      const code = (error as { code?: unknown }).code;
      const text = error instanceof Error ? error.message : String(error);
      traceId = (error as { record?: { traceId?: string } }).record?.traceId ?? traceId;
      if (code === 'ACTION_CHARGED') return this.chargedEarlier(base, requestId, actionId, traceId);
      if (code === 'OUTCOME_UNKNOWN' || code === 'IN_PROGRESS' || code === 'LEASE_LOST')
        return {
          ...envelopeOf('unknown', requestId, base, traceId, 'the outcome is not known yet; do not send again, wait'),
          nextAction: 'wait',
          error: { code, message: text },
        };
      if (code === 'STORE_UNAVAILABLE')
        return {
          ...envelopeOf('failed', requestId, base, traceId, 'nothing was sent; try again later'),
          nextAction: 'wait',
          error: { code, message: text },
        };
      const stable = typeof code === 'string' ? code : 'TOOL_FAILED';
      return {
        ...envelopeOf('failed', requestId, base, traceId, `failed: ${text}`),
        error: { code: stable, message: text },
      };
    }
  }
}

/** Creates the tables it needs and returns the runtime. */
export async function createAgentRuntime(options: AgentRuntimeOptions): Promise<AgentRuntime> {
  // Spans start from the first call: the optional OpenTelemetry API has been looked for by then.
  await Promise.all([migrateAgentTables(options.db), tracingReady()]);
  return new AgentRuntime(options);
}
