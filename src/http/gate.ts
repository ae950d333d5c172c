import { randomUUID } from 'node:crypto';
import { type Duration, type Ttl, toMs } from '../core/duration.js';
import { OncelyError } from '../core/errors.js';
import { type KeyPart, keyFrom, validateKey } from '../core/key.js';
import type { Surface } from '../core/metrics.js';
import type { LeaseExpiredPolicy } from '../core/record.js';
import { contextFromHeaders, spanContext, withContext } from '../core/tracing.js';
import type { RunContext } from '../engine/context.js';
import type { ClaimIn, Oncely, RunResult } from '../engine/engine.js';
import { Claimed, type Execution, type KeepPolicy } from './claim.js';
import { REQUEST_ID_HEADER, readIdHeader, readKeyHeader, TRACE_HEADER } from './header.js';
import { problemFor } from './problem.js';
import { decodeResponse, type HttpResponse, type StoredResponse, withExpiry } from './response.js';

export type { Execution } from './claim.js';

/**
 * Options shared by `oncely/express`, `oncely/fastify` and `oncely/hono`; `Req` is the framework's
 * request (or context, for Hono).
 */
export interface IdempotencyOptions<Req> {
  /**
   * The engine: `await createOncely({ store })`. Its logger, `onDecision` hook, metrics and tracer
   * observe the middleware's runs too (as `surface: 'http'`): observing is configured once, there.
   */
  once: Oncely;
  /** Reject covered requests without a key with 400. Default true. */
  required?: boolean;
  /**
   * The key of a request that sends no `Idempotency-Key` header, for clients that send it in the
   * body: body fields (`['orderId', 'action']`) or a function of the request and its parsed body
   * returning the parts, joined with `keyFrom`. A missing field (or `undefined` from the function)
   * is no key (400 KEY_REQUIRED when required); a part keyFrom refuses is 400 KEY_INVALID. The
   * header wins when both are sent. Default: the header only.
   */
  key?: readonly string[] | ((req: Req, body: unknown) => KeyPart | readonly KeyPart[] | undefined);
  /** Methods covered; others pass through untouched. Default POST and PATCH. */
  methods?: readonly string[];
  /** The tenant of a request: the authenticated principal, API key or account. Default: the engine's tenant. */
  tenant?: (req: Req) => string | undefined | Promise<string | undefined>;
  /** The action of a request. Default: method and route pattern, e.g. 'POST /orders/:id/charge'. */
  action?: (req: Req) => string;
  /** How long a response is replayed. Default: the engine's (24h unless set). */
  ttl?: Ttl;
  /** Claim lease while the handler runs. Default: the engine's. */
  lease?: Duration;
  /** Wait this long for a concurrent first request instead of answering 409. Default: no wait. */
  wait?: Duration | false;
  /**
   * A claim whose holder vanished (its lease ran out): 'retry' lets the next request take over,
   * 'hold' turns the record `unknown` and answers 409 OUTCOME_UNKNOWN until it is resolved.
   * Default: the engine's ('retry' unless set).
   */
  onLeaseExpired?: LeaseExpiredPolicy;
  /**
   * What identifies "the same request": body fields to compare (with the method, route and request
   * target), or a function of the request. Default: method, route, request target and the whole body.
   */
  fingerprint?: readonly string[] | ((req: Req) => unknown);
  /** Which handler statuses are stored and replayed; the others release the key. Default: 2xx and 4xx. */
  storeStatuses?: (status: number) => boolean;
  /**
   * The former name of `storeStatuses`, read when that is not given.
   * @deprecated Use `storeStatuses`: "store" names the engine's record store everywhere else. Removed in the next version.
   */
  store?: (status: number) => boolean;
  /** Response headers stored and replayed beside status and body. Default: content-type, location. */
  replayHeaders?: readonly string[];
  /**
   * Largest request body accepted (413 otherwise) and largest response body stored (a duplicate of a
   * bigger one gets 409 RESPONSE_NOT_STORED). Default 1 MiB.
   */
  maxBodyBytes?: number;
}

/** What an adapter knows about a request before its handler runs. */
export interface RequestFacts {
  method: string;
  /** The route pattern, or the path when the framework cannot tell the pattern yet. */
  route: string;
  /**
   * The request target as sent, path and query (`/orders/2/charge?notify=1`): part of the default
   * fingerprint, since records are scoped by the route pattern and the same key on another resource
   * of that route is another request. Omitted where the route names the resource already (the host).
   */
  target?: string;
  header: string | string[] | undefined;
  /** A key the caller already derived (from business fields), used when the header is absent. */
  key?: string;
  body: unknown;
  /** Size of the request body when known (Content-Length). */
  bodyBytes: number | undefined;
  /**
   * The request's headers by lower-case name, where the gate reads `Oncely-Trace-Id`,
   * `X-Request-Id` and W3C `traceparent`/`tracestate`. Omitted: no trace id given, a new request id.
   */
  headers?: RequestHeaders;
}

/** Request headers by lower-case name, as Node hands them out. */
export type RequestHeaders = Record<string, string | string[] | undefined>;

/** The ids of one request: the intent's trace id if the client sent one, and this attempt's own id. */
interface RequestIds {
  traceId: string | undefined;
  requestId: string;
}

/** What the adapter must do with a request. */
export type GateStart =
  | { kind: 'pass' }
  | { kind: 'respond'; response: HttpResponse }
  | { kind: 'execute'; run: Execution };

const DEFAULT_METHODS = ['POST', 'PATCH'];
const DEFAULT_HEADERS = ['content-type', 'location'];
const DEFAULT_MAX_BODY = 1024 * 1024;
const DEFAULT_GRACE = '30s';
// Room in a stored response for its status, kept headers and JSON punctuation beside the base64 body.
const ENVELOPE_BYTES = 64 * 1024;
const storedByDefault = (status: number) => status >= 200 && status < 500 && !(status >= 300 && status < 400);

/** Only the marker of an unstorable response is kept as a failure; every other failure releases the key. */
const storesNotStored = (error: unknown) => OncelyError.is(error) && error.code === 'RESPONSE_NOT_STORED';

/** The framework-free half of every adapter: one decision per request, the same on every framework. */
export class IdempotencyGate<Req> {
  readonly maxBodyBytes: number;
  private readonly methods: Set<string>;
  private readonly policy: KeepPolicy;
  /**
   * The engine's result limit for this gate's runs: a body of maxBodyBytes stored in base64 (4 bytes
   * per 3) with its envelope. The engine's own default (1 MiB) would refuse responses from 768 KiB.
   */
  private readonly maxResultBytes: number;

  /** `surface` labels the engine's counts and decisions: 'http' for the middleware, 'handler' for the host. */
  constructor(
    private readonly options: IdempotencyOptions<Req>,
    private readonly surface: Surface = 'http',
  ) {
    if (!options?.once)
      throw new OncelyError('INVALID_ARGUMENT', 'idempotency() needs { once }: the engine from createOncely()');
    this.methods = new Set((options.methods ?? DEFAULT_METHODS).map((m) => m.toUpperCase()));
    this.policy = {
      stores: options.storeStatuses ?? options.store ?? storedByDefault,
      keep: (options.replayHeaders ?? DEFAULT_HEADERS).map((h) => h.toLowerCase()),
      graceMs: toMs(options.lease ?? DEFAULT_GRACE, 'lease'),
      maxBodyBytes: options.maxBodyBytes ?? DEFAULT_MAX_BODY,
    };
    this.maxBodyBytes = this.policy.maxBodyBytes;
    if (!Number.isInteger(this.maxBodyBytes) || this.maxBodyBytes < 0)
      throw new OncelyError('INVALID_ARGUMENT', 'maxBodyBytes must be a whole number of bytes');
    this.maxResultBytes = Math.ceil(this.maxBodyBytes / 3) * 4 + ENVELOPE_BYTES;
  }

  /** The 413 problem of a request body over maxBodyBytes, for adapters that refuse one before reading it. */
  tooLarge(headers: RequestHeaders = {}): HttpResponse {
    let ids: RequestIds;
    try {
      ids = idsOf(headers);
    } catch {
      // Refused for its size either way; a malformed id is then not worth a second problem.
      ids = { traceId: undefined, requestId: randomUUID() };
    }
    return this.tooLargeFor(ids);
  }

  private tooLargeFor(ids: RequestIds): HttpResponse {
    const error = new OncelyError('REQUEST_TOO_LARGE', `request body is over ${this.maxBodyBytes} bytes`);
    return identified(problemFor(error), ids.traceId, ids.requestId);
  }

  /** True when the method is covered; adapters skip all work for the rest. */
  covers(method: string): boolean {
    // Frameworks hand methods out upper-case already: the copy is only made for the rest.
    return this.methods.has(method) || this.methods.has(method.toUpperCase());
  }

  /**
   * Decides what happens to a covered request: pass, answer now, or execute under a claim. With
   * `tx` (a caller's open transaction) the claim and its outcome commit with the caller's writes;
   * with `claimIn` the claim is committed first in a transaction of its own (the engine's
   * `claimIn`), and `finish` names the transaction its outcome joins.
   */
  async begin(req: Req, facts: RequestFacts, join: { tx?: unknown; claimIn?: ClaimIn } = {}): Promise<GateStart> {
    const headers = facts.headers ?? NO_HEADERS;
    let ids: RequestIds;
    try {
      ids = idsOf(headers);
    } catch (error) {
      return { kind: 'respond', response: identified(problemFor(error as OncelyError), undefined, randomUUID()) };
    }
    let key: string | undefined;
    try {
      key =
        readKeyHeader(facts.header) ?? (facts.key === undefined ? this.keyOf(req, facts.body) : validateKey(facts.key));
    } catch (error) {
      return { kind: 'respond', response: identified(problemFor(error as OncelyError), ids.traceId, ids.requestId) };
    }
    if (facts.bodyBytes !== undefined && facts.bodyBytes > this.maxBodyBytes)
      return { kind: 'respond', response: this.tooLargeFor(ids) };
    if (key === undefined) {
      if (this.options.required === false) return { kind: 'pass' };
      const response = problemFor(new OncelyError('KEY_REQUIRED', 'missing'));
      return { kind: 'respond', response: identified(response, ids.traceId, ids.requestId) };
    }
    const method = facts.method.toUpperCase();
    const action = this.options.action?.(req) ?? `${method} ${facts.route}`;
    const tenant = await this.options.tenant?.(req);
    const { fingerprint } = this.options;
    const input =
      typeof fingerprint === 'function'
        ? fingerprint(req)
        : // One object hashed once: the target joins the body rather than being hashed on its own.
          { method, action, target: facts.target, body: fingerprint ? pick(facts.body, fingerprint) : facts.body };
    // The caller's W3C trace, continued: the engine's span is a child of the caller's span.
    const parent = contextFromHeaders(headers);
    return withContext(parent, () => this.claim(action, key, input, tenant, join, ids));
  }

  /** The `key` option's key of a request without the header: undefined when it names none. Throws KEY_INVALID. */
  private keyOf(req: Req, body: unknown): string | undefined {
    const { key } = this.options;
    if (key === undefined) return undefined;
    let parts: KeyPart | readonly KeyPart[] | undefined;
    if (typeof key === 'function') parts = key(req, body);
    else {
      const source = (body ?? {}) as Record<string, KeyPart | null | undefined>;
      const values = key.map((field) => source[field]);
      parts = values.some((value) => value === undefined || value === null || value === '')
        ? undefined
        : (values as KeyPart[]);
    }
    if (parts === undefined) return undefined;
    return Array.isArray(parts) ? keyFrom(...(parts as KeyPart[])) : keyFrom(parts as KeyPart);
  }

  /** Claims the key and answers as soon as the engine decides: execute, replay, or a refusal's problem. */
  private claim(
    action: string,
    key: string,
    input: unknown,
    tenant: string | undefined,
    { tx, claimIn }: { tx?: unknown; claimIn?: ClaimIn },
    ids: RequestIds,
  ): Promise<GateStart> {
    return new Promise<GateStart>((resolve, reject) => {
      let execution: Claimed | undefined;
      // Called once the claim is written, so after `settled` below is set; inside the engine's
      // execute span, whose context the handler is then run in.
      const start = (ctx: RunContext): Promise<StoredResponse> => {
        execution = new Claimed(ctx, settled, this.policy, spanContext());
        resolve({ kind: 'execute', run: execution });
        return execution.outcome;
      };
      // The same option values on every request: the engine resolves them once and reuses them.
      const { once, ttl, lease, wait, onLeaseExpired } = this.options;
      const { maxResultBytes, surface } = this;
      const { traceId, requestId } = ids;
      const request = {
        action,
        key,
        tenant,
        input,
        tx,
        claimIn,
        ttl,
        lease,
        wait,
        onLeaseExpired,
        onError: storesNotStored,
        maxResultBytes,
        surface,
        traceId,
        requestId,
      };
      // Settles after the claimed handler's outcome too; only a run that never claimed answers here.
      const settled: Promise<RunResult<StoredResponse> | undefined> = once.run(request, start).then(
        (result) => {
          if (execution === undefined) {
            try {
              resolve({ kind: 'respond', response: replayed(result, requestId) });
            } catch (error) {
              reject(error);
            }
          }
          return result;
        },
        (error: unknown) => {
          execution?.ranInto(error);
          if (execution === undefined) {
            if (OncelyError.is(error)) {
              const response = identified(problemFor(error), error.record?.traceId ?? traceId, requestId);
              resolve({ kind: 'respond', response });
            } else reject(error);
          }
          return undefined;
        },
      );
    });
  }
}

/** A stored response, marked as a replay, with the intent's trace id and this request's own id. */
function replayed(result: RunResult<StoredResponse>, requestId: string): HttpResponse {
  const response = withExpiry(decodeResponse(result.value), result.record);
  response.headers['idempotent-replayed'] = 'true';
  return identified(response, result.record.traceId, requestId);
}

const NO_HEADERS: RequestHeaders = {};

/** The ids of a request: its Oncely-Trace-Id if sent, its X-Request-Id or a new one. Throws TRACE_ID_INVALID. */
function idsOf(headers: RequestHeaders): RequestIds {
  const traceId = readIdHeader(headers['oncely-trace-id'], TRACE_HEADER);
  const requestId = readIdHeader(headers['x-request-id'], REQUEST_ID_HEADER) ?? randomUUID();
  return { traceId, requestId };
}

/** Sets the Oncely-Trace-Id (when known) and X-Request-Id response headers of a response the gate answers. */
function identified(response: HttpResponse, traceId: string | undefined, requestId: string): HttpResponse {
  if (traceId !== undefined) response.headers['oncely-trace-id'] = traceId;
  response.headers['x-request-id'] = requestId;
  return response;
}

function pick(body: unknown, fields: readonly string[]): Record<string, unknown> {
  const source = (body ?? {}) as Record<string, unknown>;
  const picked: Record<string, unknown> = {};
  for (const field of fields) picked[field] = source[field];
  return picked;
}
