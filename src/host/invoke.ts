import { randomUUID } from 'node:crypto';
import type { Clock } from '../core/clock.js';
import { type AnyErrorCode, ERRORS, type ErrorCode, OncelyError, statusOf } from '../core/errors.js';
import { keyFrom, MAX_NAME_LENGTH, validateName } from '../core/key.js';
import type { DecisionEvent, Observer } from '../core/observer.js';
import type { Sql } from '../db/types.js';
import type { RunContext } from '../engine/context.js';
import { CallCounts } from '../engine/counts.js';
import type { ClaimIn, Oncely } from '../engine/engine.js';
import { type ErrorPolicy, storesError } from '../engine/options.js';
import type { Flows } from '../flows/flows.js';
import { IdempotencyGate, type RequestFacts } from '../http/gate.js';
import { REQUEST_ID_HEADER, readIdHeader, readKeyHeader, TRACE_HEADER, traceparentId } from '../http/header.js';
import { problemFor } from '../http/problem.js';
import type { HttpResponse } from '../http/response.js';
import { type App, claimDeclarations, type HandlerModule } from './app.js';
import { byteLimit, readBodyCapped } from './body.js';
import { hostContext } from './context.js';
import { createDataStore } from './data-store.js';
import { STATEMENT_TIMEOUT, timeoutMs, withinTimeout } from './deadline.js';
import { logFailure } from './failure-log.js';
import type { AppSchema } from './schema.js';
import type { Count, Totals } from './totals.js';

/** The reply of `POST /v1/invoke/:handler`: `{ code: 0, data }` or `{ code, error: { code, message } }`. */
export function envelope(
  status: number,
  body: { data: unknown } | { error: { code: AnyErrorCode; message: string } },
): HttpResponse {
  const text = JSON.stringify(
    'data' in body ? { code: 0, data: body.data ?? null } : { code: status, error: body.error },
  );
  return { status, headers: { 'content-type': 'application/json' }, body: Buffer.from(text) };
}

/** Everything an invocation needs from the host. */
export interface InvokeDeps {
  /** Where the invocation's transaction counts (the engine's run, outbox messages enqueued). */
  totals: Totals;
  /** Decisions the host makes before the engine (a duplicate of a key running now). */
  observer: Observer;
  once: Oncely;
  schema: () => AppSchema;
  flows: Flows | undefined;
  afterCommit(): void;
  /** A transaction of the host's Db for a claim-first write (effects 'external'): on SQLite, in the Db's queue. */
  claimIn: ClaimIn;
  /** The host's clock: the time outbox messages a handler enqueues are written and due at. Default the system's. */
  clock?: Clock;
}

/**
 * The response header of an executed invocation under a key: the record's attempt that ran it (1,
 * then + 1 per takeover or released failure), so a client or a test tells a takeover from a first
 * execution. It is stored with the answer, so its replays carry it too (`Idempotent-Replayed`
 * tells them apart); refusals and keyless calls do not.
 */
export const ATTEMPT_HEADER = 'oncely-attempt';

/** What the gate of a handler knows of a request: its resolved tenant. */
interface Invocation {
  tenant: string;
}

/** The ids of one invocation: the intent's trace id when the caller sent one, and this attempt's own id. */
interface Ids {
  traceId: string | undefined;
  requestId: string;
}

/** A handler with its gate and timeout, fixed when the host starts. */
interface Bound {
  module: HandlerModule;
  /** The engine's action of its runs: the gate's `POST <handler>`. */
  action: string;
  gate: IdempotencyGate<Invocation>;
  timeoutMs: number;
  /** effects 'external': the claim is committed before the handler's transaction opens. */
  external: boolean;
  /** effects 'external': which thrown errors are stored (as the failure's envelope) instead of releasing the key. */
  onError: ErrorPolicy;
}

/** The engine's action of a handler's runs (its records, its reconcile function): the gate's `POST <handler>`. */
export function handlerAction(id: string): string {
  return `POST ${id}`;
}

/** Failures that say nothing about the handler's outcome (the database, the claim): never stored, whatever onError says. */
const NEVER_STORED = new Set(['STORE_UNAVAILABLE', 'LEASE_LOST', 'OUTCOME_NOT_STORED']);

/** How long a duplicate of a running key is told to wait before it retries. */
const IN_PROGRESS_RETRY_MS = 1000;

/**
 * Runs handler invocations, each in one transaction: the idempotency record, the handler's store
 * writes and its outbox rows commit together, or none of them does.
 */
export class Invoker {
  private readonly handlers = new Map<string, Bound>();
  /** Keys running in this process, as (tenant, handler, key): their duplicates never wait for a connection. */
  private readonly running = new Set<string>();
  private readonly maxBodyBytes: number;
  /** The engine's own counting, for the duplicates this host refuses before the engine sees them. */
  private readonly counts: CallCounts;

  constructor(
    private readonly app: App,
    private readonly deps: InvokeDeps,
  ) {
    this.maxBodyBytes = byteLimit(app.config.maxBodyBytes, 'maxBodyBytes');
    this.counts = new CallCounts(deps.totals.metrics);
    for (const [id, module] of app.handlers) {
      const declared = module.idempotency ?? {};
      const { external, lease, onLeaseExpired, onError = 'release' } = claimDeclarations(module, `handler ${id}`);
      const gate = new IdempotencyGate<Invocation>(
        {
          once: deps.once,
          tenant: (invocation) => invocation.tenant,
          required: declared.required ?? true,
          ttl: declared.ttl,
          lease,
          onLeaseExpired,
          // Claim first: every answer the host hands the gate is kept; onError chose the failures.
          ...(external ? { storeStatuses: () => true } : {}),
          maxBodyBytes: this.maxBodyBytes,
          // A replay is the first answer: the attempt that ran it is part of it.
          replayHeaders: ['content-type', ATTEMPT_HEADER],
          // Counted and decided as the host's handlers, not as HTTP middleware.
        },
        'handler',
      );
      this.handlers.set(id, {
        module,
        gate,
        action: handlerAction(id),
        timeoutMs: timeoutMs(module.timeout, app.config.timeout),
        external,
        onError,
      });
    }
  }

  /**
   * Answers `POST /v1/invoke/:handler` for `request`; every answer carries the intent's trace id
   * (the record's, else the one sent in Oncely-Trace-Id) and this attempt's request id
   * (X-Request-Id, else a new one) in its envelope and headers.
   */
  async invoke(id: string, request: Request): Promise<HttpResponse> {
    let ids: Ids;
    try {
      ids = {
        // A W3C traceparent names the intent too when no Oncely-Trace-Id does.
        traceId:
          readIdHeader(request.headers.get(TRACE_HEADER) ?? undefined, TRACE_HEADER) ??
          traceparentId(request.headers.get('traceparent')),
        requestId: readIdHeader(request.headers.get(REQUEST_ID_HEADER) ?? undefined, REQUEST_ID_HEADER) ?? randomUUID(),
      };
    } catch (error) {
      return identified(asEnvelope(problemFor(error as OncelyError)), { traceId: undefined, requestId: randomUUID() });
    }
    return identified(await this.answer(id, request, ids), ids);
  }

  private async answer(id: string, request: Request, ids: Ids): Promise<HttpResponse> {
    const handler = this.handlers.get(id);
    if (!handler) return refuse('HANDLER_UNKNOWN', `no handler ${id}`);
    const tenant = this.tenantOf(request);
    if (tenant === undefined)
      return refuse(
        'TENANT_INVALID',
        `the tenant of this request must be 1 to ${MAX_NAME_LENGTH} printable characters`,
      );
    const read = await readBodyCapped(request, this.maxBodyBytes);
    if (!read.ok) return refuse('REQUEST_TOO_LARGE', `request body is over ${this.maxBodyBytes} bytes`);
    const text = read.body.toString('utf8');
    let input: unknown = {};
    try {
      if (text !== '') input = JSON.parse(text);
    } catch {
      return refuse('BODY_INVALID', 'the body must be JSON');
    }
    const { module } = handler;
    if (module.input) {
      const checked = await module.input['~standard'].validate(input);
      if (checked.issues) return refuse('INPUT_INVALID', checked.issues.map((i) => i.message).join('; '));
      input = checked.value;
    }
    let key: string | undefined;
    try {
      key = keyOf(module, request.headers.get('idempotency-key'), input);
    } catch (error) {
      return asEnvelope(problemFor(error as OncelyError));
    }
    const call = { tenant, input, bodyBytes: read.body.byteLength, ids };
    if (key === undefined) {
      // No record to keep a trace id: this execution's own, sent or new, is the intent's.
      ids.traceId ??= randomUUID();
      return this.execute(handler, id, call, undefined);
    }
    const slot = JSON.stringify([tenant, id, key]);
    if (this.running.has(slot)) return this.refuseDuplicate(handler, tenant, key, ids);
    this.running.add(slot);
    try {
      return await this.execute(handler, id, call, { key, slot });
    } finally {
      this.running.delete(slot);
    }
  }

  /** The tenant named by `config.tenant(headers)` (default 'default'), or undefined when it is not a valid name. */
  private tenantOf(request: Request): string | undefined {
    const tenant = this.app.config.tenant?.(Object.fromEntries(request.headers)) ?? 'default';
    try {
      return validateName(tenant, 'tenant');
    } catch {
      return undefined;
    }
  }

  private async execute(
    handler: Bound,
    id: string,
    call: { tenant: string; input: unknown; bodyBytes: number; ids: Ids },
    claim: { key: string; slot: string } | undefined,
  ): Promise<HttpResponse> {
    const { totals, schema, flows } = this.deps;
    const { tenant, input, bodyBytes, ids } = call;
    const { logger } = this.app.config;
    const what = `handler ${id}`;
    const run = (tx: Sql, context: RunContext | undefined, count: Count) =>
      withinTimeout(tx, handler.timeoutMs, what, async (guarded) =>
        dataEnvelope(
          await handler.module.handle(
            input,
            hostContext(guarded, createDataStore(guarded, schema(), { count }), context, tenant, {
              flows,
              logger,
              count,
              ids,
              clock: this.deps.clock,
            }),
          ),
        ),
      );
    // The gate reads the ids from here: the request id made above, so the envelope and the engine agree.
    const headers = { 'x-request-id': ids.requestId, 'oncely-trace-id': ids.traceId };
    if (handler.external && claim) {
      const facts = { method: 'POST', route: id, header: undefined, key: claim.key, body: input, bodyBytes, headers };
      return this.claimFirst(handler, id, tenant, facts, run, ids);
    }
    try {
      const response = await totals.transaction(async (tx, counts) => {
        const { count } = counts;
        if (tx.dialect === 'postgres' && !(await this.prepare(tx, handler.timeoutMs, claim?.slot)))
          return this.refuseDuplicate(handler, tenant, claim?.key ?? '', ids);
        const start = await handler.gate.begin(
          { tenant },
          { method: 'POST', route: id, header: undefined, key: claim?.key, body: input, bodyBytes, headers },
          { tx: tx.handle },
        );
        // The engine's counts of this call (a replay, a refusal, an execution) commit with it.
        if (start.kind === 'respond') {
          await counts.engine('handler', handler.action);
          return asEnvelope(start.response);
        }
        if (start.kind === 'pass') return run(tx, undefined, count);
        const execution = start.run;
        let answer: HttpResponse;
        try {
          // In the engine's execute span: spans the handler starts are its children.
          answer = await execution.within(() => run(tx, execution.context, count));
        } catch (error) {
          await execution.abandon(error);
          throw error;
        }
        const finished = await execution.finish(executed(answer, execution.context, ids), true);
        await counts.engine('handler', handler.action);
        return finished;
      });
      this.deps.afterCommit();
      return response;
    } catch (error) {
      // The handler threw, timed out or returned what JSON cannot carry: its transaction (record
      // included) rolled back, so nothing it wrote survives and the key is free again.
      return this.failed(error, id, claim?.key, ids);
    }
  }

  /**
   * effects 'external': the claim is committed first, in a transaction of its own; the handler
   * then runs in its own transaction, where its outcome is written with the fenced completion, so
   * its rows and its outcome commit together. A throw rolls that back, then the claim is released
   * (or the failure's envelope stored, per onError) in a transaction of its own; a crash leaves
   * the claim to the lease and onLeaseExpired.
   */
  private async claimFirst(
    handler: Bound,
    id: string,
    tenant: string,
    facts: RequestFacts & { key: string },
    run: (tx: Sql, context: RunContext | undefined, count: Count) => Promise<HttpResponse>,
    ids: Ids,
  ): Promise<HttpResponse> {
    const { totals, claimIn } = this.deps;
    const start = await handler.gate.begin({ tenant }, facts, { claimIn });
    if (start.kind === 'respond') return asEnvelope(start.response);
    // The gate passes only keyless requests, and this one has a key.
    if (start.kind === 'pass') throw new Error(`the gate passed keyed request ${facts.key} of ${id}`);
    const execution = start.run;
    try {
      const response = await totals.transaction(async (tx, counts) => {
        if (tx.dialect === 'postgres') await this.prepare(tx, handler.timeoutMs, undefined);
        const answer = await execution.within(() => run(tx, execution.context, counts.count));
        const finished = await execution.finish(executed(answer, execution.context, ids), true, tx.handle);
        await counts.engine('handler', handler.action);
        return finished;
      });
      this.deps.afterCommit();
      return response;
    } catch (error) {
      // The claim was committed first: this attempt ran, whatever becomes of its outcome.
      const answer = executed(this.failed(error, id, facts.key, ids), execution.context, ids);
      // After the rollback: on SQLite a write of claimIn waits for the transaction before it.
      if (storesError(handler.onError, error) && !NEVER_STORED.has((error as { code?: string }).code ?? ''))
        await execution.finish(answer, true);
      else await execution.abandon(error);
      return answer;
    }
  }

  /** Logs a failed invocation and answers it: the handler's status and code when public, else 500 HANDLER_FAILED. */
  private failed(error: unknown, id: string, key: string | undefined, ids: Ids): HttpResponse {
    const { logger } = this.app.config;
    const e = error as { status?: unknown; code?: unknown; message?: unknown };
    // A status the error chose, else its code's in the catalogue: a contract error of the caller
    // (ctx.stableId without a key: 400 KEY_REQUIRED) is a 4xx, the server's own failures 5xx.
    const status =
      typeof e.status === 'number' && e.status >= 400 && e.status < 600
        ? e.status
        : OncelyError.is(error)
          ? statusOf(error.code)
          : 500;
    logFailure(
      logger,
      'handler failed',
      `${id}, key ${key ?? '(none)'}`,
      { handler: id, key: key ?? null, status, requestId: ids.requestId },
      error,
    );
    // Public: an OncelyError, or a 4xx the handler chose with a code. Anything else (a driver's
    // SQL error, a bug) may carry internals, so the client gets a generic line and the log the rest.
    const isPublic = OncelyError.is(error) || (status < 500 && typeof e.code === 'string');
    const code = isPublic && typeof e.code === 'string' ? e.code : 'HANDLER_FAILED';
    const message =
      isPublic && typeof e.message === 'string' ? e.message : `handler ${id} failed; the server log has the error`;
    // A database lost mid-request (a terminated connection, a failover) rolled everything back:
    // 503 with Retry-After, as the gate answers a store outage, so the client retries the key.
    if (OncelyError.is(error) && error.code === 'STORE_UNAVAILABLE') return asEnvelope(problemFor(error));
    const answer = failure(status, code, message);
    if (code === 'HANDLER_TIMEOUT') answer.headers['retry-after'] = '1';
    return answer;
  }

  /**
   * A duplicate of a key running now, refused before the engine sees it: counted by the engine's
   * own rule as an in_progress refusal that found the record, so the rates hold every duplicate
   * of the host.
   */
  private refuseDuplicate(handler: Bound, tenant: string, key: string, ids: Ids): HttpResponse {
    const { observer } = this.deps;
    const { action } = handler;
    this.counts.count({ surface: 'handler', action, outcome: 'in_progress', found: true, takenOver: false }, 0);
    if (observer.listening) {
      const decision: DecisionEvent = { decision: 'in_progress', surface: 'handler', action, key, tenant };
      decision.requestId = ids.requestId;
      if (ids.traceId !== undefined) decision.traceId = ids.traceId;
      observer.decide(decision);
    }
    return inProgress();
  }

  /**
   * PostgreSQL, first statement of the transaction: bounds its statements by the handler's
   * timeout and, for a keyed request, takes a try-lock on (tenant, handler, key). A duplicate
   * running in another process holds that lock: this one answers 409 at once instead of
   * waiting on the records' unique index with a pooled connection.
   */
  private async prepare(tx: Sql, ms: number, slot: string | undefined): Promise<boolean> {
    if (slot === undefined) {
      await tx.run(`SELECT ${STATEMENT_TIMEOUT}`, [String(ms)]);
      return true;
    }
    const [row] = await tx.all<{ free: boolean }>(
      `SELECT pg_try_advisory_xact_lock(hashtextextended(?, 0)) AS free, ${STATEMENT_TIMEOUT}`,
      [slot, String(ms)],
    );
    return row?.free === true;
  }
}

/** The key of a request: its Idempotency-Key header, else one built from the declared input fields (never a random one). */
function keyOf(module: HandlerModule, header: string | null, input: unknown): string | undefined {
  const fromHeader = readKeyHeader(header);
  if (fromHeader !== undefined) return fromHeader;
  const fields = module.idempotency?.keyFields;
  return fields?.length ? keyFrom(...fields.map((f) => fieldOf(input, f))) : undefined;
}

function fieldOf(input: unknown, field: string): string | number {
  const value = (input as Record<string, unknown> | null)?.[field];
  if (typeof value === 'string' || typeof value === 'number') return value;
  throw new OncelyError('KEY_REQUIRED', `key field ${field} is missing from the input`);
}

/**
 * The success reply of a handler's result. Built inside the transaction: a result JSON cannot
 * carry (a bigint from an ORM, a cycle) fails the invocation and rolls back its writes.
 */
function dataEnvelope(data: unknown): HttpResponse {
  try {
    return envelope(200, { data });
  } catch (error) {
    throw Object.assign(
      new OncelyError('RESULT_NOT_SERIALIZABLE', `the handler's result is not JSON: ${(error as Error).message}`, {
        cause: error,
      }),
      { status: ERRORS.RESULT_NOT_SERIALIZABLE.status },
    );
  }
}

function failure(status: number, code: AnyErrorCode, message: string): HttpResponse {
  return envelope(status, { error: { code, message } });
}

/** A refusal before the handler runs, answered with its code's status in the catalogue. */
function refuse(code: ErrorCode, message: string): HttpResponse {
  return failure(ERRORS[code].status, code, message);
}

function inProgress(): HttpResponse {
  return asEnvelope(
    problemFor(
      new OncelyError('IN_PROGRESS', 'a request with this key is running now', { retryAfterMs: IN_PROGRESS_RETRY_MS }),
    ),
  );
}

/**
 * The answer of an execution under a key as it is stored, whole: the attempt it was, and the
 * intent's trace id (the record's) and this attempt's request id in the envelope, so every replay
 * of it is this answer byte for byte.
 */
function executed(response: HttpResponse, context: RunContext, ids: Ids): HttpResponse {
  response.headers[ATTEMPT_HEADER] = String(context.attempt);
  return withIds(response, { traceId: context.traceId, requestId: ids.requestId });
}

/** Problem documents of the gate, in the host's envelope (status, Retry-After and the ids kept). */
function asEnvelope(response: HttpResponse): HttpResponse {
  const type = response.headers['content-type'];
  if (typeof type !== 'string' || !type.startsWith('application/problem+json')) return response;
  const problem = JSON.parse(Buffer.from(response.body).toString()) as { code: string; detail: string };
  const wrapped = envelope(response.status, { error: { code: problem.code, message: problem.detail } });
  for (const name of ['retry-after', 'oncely-trace-id'] as const) {
    const value = response.headers[name];
    if (value !== undefined) wrapped.headers[name] = value;
  }
  return wrapped;
}

/**
 * Every answer with the ids: the Oncely-Trace-Id header (the record's when the gate answered, else
 * the one the caller sent) and this request's X-Request-Id. An execution under a key has them in
 * its envelope already (see `executed`), and a replay is that stored envelope, byte for byte, so
 * its `requestId` names the attempt that ran; any other answer gets them here, a replay of an
 * answer stored before envelopes were stored whole (it has no Oncely-Attempt) included.
 */
function identified(response: HttpResponse, ids: Ids): HttpResponse {
  if (response.headers[ATTEMPT_HEADER] === undefined) return withIds(response, ids);
  response.headers['x-request-id'] = ids.requestId;
  return response;
}

/** The envelope with the ids added last, `{ code, data | error, traceId, requestId }`, and as headers. */
function withIds(response: HttpResponse, ids: Ids): HttpResponse {
  const traceId = (response.headers['oncely-trace-id'] as string | undefined) ?? ids.traceId;
  const { headers } = response;
  if (traceId !== undefined) headers['oncely-trace-id'] = traceId;
  headers['x-request-id'] = ids.requestId;
  const body = Buffer.from(response.body);
  // Every envelope is a JSON object: the ids go in before its closing brace.
  const tail = `${traceId === undefined ? '' : `,"traceId":${JSON.stringify(traceId)}`},"requestId":${JSON.stringify(ids.requestId)}}`;
  return { ...response, body: Buffer.concat([body.subarray(0, body.length - 1), Buffer.from(tail)]) };
}
