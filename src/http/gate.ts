import { type Duration, type Ttl, toMs } from '../core/duration.js';
import { OncelyError } from '../core/errors.js';
import { validateKey } from '../core/key.js';
import type { PublicRecord } from '../core/record.js';
import type { RunContext } from '../engine/context.js';
import type { Oncely, RunResult } from '../engine/engine.js';
import { readKeyHeader } from './header.js';
import { problemFor } from './problem.js';
import { decodeResponse, encodeResponse, type HttpResponse, type StoredResponse } from './response.js';

/**
 * Options shared by `oncely/express`, `oncely/fastify` and `oncely/hono`; `Req` is the framework's
 * request (or context, for Hono).
 */
export interface IdempotencyOptions<Req> {
  /** The engine: `await createOncely({ store })`. */
  once: Oncely;
  /** Reject covered requests without a key with 400. Default true. */
  required?: boolean;
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
  /** What identifies "the same request": body fields to compare, or a function. Default: method, route and the whole body. */
  fingerprint?: readonly string[] | ((req: Req) => unknown);
  /** Which handler statuses are stored and replayed; the others release the key. Default: 2xx and 4xx. */
  store?: (status: number) => boolean;
  /** Response headers stored and replayed beside status and body. Default: content-type, location. */
  replayHeaders?: readonly string[];
  /** Largest request body accepted (413 otherwise) and largest response body stored. Default 1 MiB. */
  maxBodyBytes?: number;
}

/** What an adapter knows about a request before its handler runs. */
export interface RequestFacts {
  method: string;
  /** The route pattern, or the path when the framework cannot tell the pattern yet. */
  route: string;
  header: string | string[] | undefined;
  /** A key the caller already derived (from business fields), used when the header is absent. */
  key?: string;
  body: unknown;
  /** Size of the request body when known (Content-Length). */
  bodyBytes: number | undefined;
}

/** What the adapter must do with a request. */
export type GateStart =
  | { kind: 'pass' }
  | { kind: 'respond'; response: HttpResponse }
  | { kind: 'execute'; run: Execution };

/** A claimed request: report its response (or its abandonment) so the record is written. */
export interface Execution {
  /** The engine's context of the claim: key, stable ids, trace and request ids. */
  readonly context: RunContext;
  /**
   * Stores (or releases) the captured response and returns the response to send. `complete` is
   * false when the body was streamed or cut at maxBodyBytes, which is never stored half.
   */
  finish(response: HttpResponse, complete: boolean): Promise<HttpResponse>;
  /** The handler threw, or will never answer: release the key for a retry. */
  abandon(reason: unknown): Promise<void>;
  /**
   * The client disconnected before the handler answered. The handler usually still answers, and
   * that answer is stored, so the client's retry gets what it missed instead of a second
   * execution; a handler that has not answered within one lease is abandoned.
   */
  clientLeft(): void;
}

const DEFAULT_METHODS = ['POST', 'PATCH'];
const DEFAULT_HEADERS = ['content-type', 'location'];
const DEFAULT_MAX_BODY = 1024 * 1024;
const DEFAULT_GRACE = '30s';
const storedByDefault = (status: number) => status >= 200 && status < 500 && !(status >= 300 && status < 400);

/** Only the marker of an unstorable response is kept as a failure; every other failure releases the key. */
const storesNotStored = (error: unknown) => error instanceof OncelyError && error.code === 'RESPONSE_NOT_STORED';

/** Marks a captured response the policy does not keep: the engine then releases the key. */
class NotKept extends Error {}

/** The framework-free half of every adapter: one decision per request, the same on every framework. */
export class IdempotencyGate<Req> {
  readonly maxBodyBytes: number;
  private readonly graceMs: number;
  private readonly methods: Set<string>;
  private readonly keep: string[];
  private readonly stores: (status: number) => boolean;

  constructor(private readonly options: IdempotencyOptions<Req>) {
    if (!options?.once)
      throw new OncelyError('INVALID_ARGUMENT', 'idempotency() needs { once }: the engine from createOncely()');
    this.methods = new Set((options.methods ?? DEFAULT_METHODS).map((m) => m.toUpperCase()));
    this.keep = (options.replayHeaders ?? DEFAULT_HEADERS).map((h) => h.toLowerCase());
    this.stores = options.store ?? storedByDefault;
    this.maxBodyBytes = options.maxBodyBytes ?? DEFAULT_MAX_BODY;
    this.graceMs = toMs(options.lease ?? DEFAULT_GRACE, 'lease');
  }

  /** True when the method is covered; adapters skip all work for the rest. */
  covers(method: string): boolean {
    return this.methods.has(method.toUpperCase());
  }

  /**
   * Decides what happens to a covered request: pass, answer now, or execute under a claim. With
   * `tx` (a caller's open transaction) the claim and its outcome commit with the caller's writes.
   */
  async begin(req: Req, facts: RequestFacts, join: { tx?: unknown } = {}): Promise<GateStart> {
    let key: string | undefined;
    try {
      key = readKeyHeader(facts.header) ?? (facts.key === undefined ? undefined : validateKey(facts.key));
      if (facts.bodyBytes !== undefined && facts.bodyBytes > this.maxBodyBytes)
        throw new OncelyError('REQUEST_TOO_LARGE', `request body is over ${this.maxBodyBytes} bytes`);
    } catch (error) {
      return { kind: 'respond', response: problemFor(error as OncelyError) };
    }
    if (key === undefined) {
      if (this.options.required === false) return { kind: 'pass' };
      return { kind: 'respond', response: problemFor(new OncelyError('KEY_REQUIRED', 'missing')) };
    }
    const method = facts.method.toUpperCase();
    const action = this.options.action?.(req) ?? `${method} ${facts.route}`;
    const tenant = await this.options.tenant?.(req);
    const { fingerprint } = this.options;
    const input =
      typeof fingerprint === 'function'
        ? fingerprint(req)
        : { method, action, body: fingerprint ? pick(facts.body, fingerprint) : facts.body };
    return this.claim({ action, key, tenant, input, tx: join.tx });
  }

  private async claim(request: {
    tx: unknown;
    action: string;
    key: string;
    tenant: string | undefined;
    input: unknown;
  }): Promise<GateStart> {
    const { ttl, lease, wait } = this.options;
    let claimed!: () => void;
    const claim = new Promise<'claimed'>((resolve) => {
      claimed = () => resolve('claimed');
    });
    let settle!: { resolve: (r: StoredResponse) => void; reject: (e: unknown) => void };
    const outcome = new Promise<StoredResponse>((resolve, reject) => {
      settle = { resolve, reject };
    });
    const run = this.options.once
      .run<StoredResponse>(
        {
          action: request.action,
          key: request.key,
          tenant: request.tenant,
          input: request.input,
          tx: request.tx,
          ttl,
          lease,
          wait,
          onError: storesNotStored,
        },
        (ctx) => {
          context = ctx;
          claimed();
          return outcome;
        },
      )
      .then(
        (result) => ({ result }),
        (error: unknown) => ({ error }),
      );
    let context!: RunContext;
    let done = false;
    let timer: NodeJS.Timeout | undefined;
    // True the first time only: an outcome is reported once, whichever of finish, abandon or the timer comes first.
    const settled = () => {
      if (done) return false;
      done = true;
      clearTimeout(timer);
      return true;
    };
    const first = await Promise.race([claim, run]);
    if (first !== 'claimed') {
      if ('result' in first) return { kind: 'respond', response: replayed(first.result) };
      if (first.error instanceof OncelyError) return { kind: 'respond', response: problemFor(first.error) };
      throw first.error;
    }
    return {
      kind: 'execute',
      run: {
        context,
        finish: async (response, complete) => {
          if (!settled()) return response;
          if (!complete)
            settle.reject(new OncelyError('RESPONSE_NOT_STORED', 'response streamed or over maxBodyBytes'));
          else if (!this.stores(response.status)) settle.reject(new NotKept());
          else settle.resolve(encodeResponse(response, this.keep));
          const done = await run;
          // Whatever happened to the record (released, lease lost, store down), this client gets its handler's response.
          return 'result' in done ? withExpiry(response, done.result.record) : response;
        },
        abandon: async (reason) => {
          if (settled()) settle.reject(reason instanceof Error ? reason : new NotKept());
          await run;
        },
        clientLeft: () => {
          if (done || timer) return;
          timer = setTimeout(() => {
            if (settled()) settle.reject(new Error('the client left and the handler never answered'));
          }, this.graceMs);
          timer.unref();
        },
      },
    };
  }
}

/** A stored response, marked as a replay. */
function replayed(result: RunResult<StoredResponse>): HttpResponse {
  const response = withExpiry(decodeResponse(result.value), result.record);
  response.headers['idempotent-replayed'] = 'true';
  return response;
}

/** Tells the client until when the key replays this response (nothing for permanent keys). */
function withExpiry(response: HttpResponse, record: PublicRecord): HttpResponse {
  if (record.expiresAt !== null) response.headers['idempotency-expires'] = new Date(record.expiresAt).toUTCString();
  return response;
}

function pick(body: unknown, fields: readonly string[]): Record<string, unknown> {
  const source = (body ?? {}) as Record<string, unknown>;
  const picked: Record<string, unknown> = {};
  for (const field of fields) picked[field] = source[field];
  return picked;
}
