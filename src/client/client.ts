import { OncelyError } from '../core/errors.js';
import { fetchIntent, type IdempotentResponse, type KeyInput, type RetryOptions, retrySettings } from './retry.js';

/** A client of one service: its base URL, headers sent on every request, and retry defaults. */
export interface ClientOptions extends RetryOptions {
  baseUrl: string | URL;
  /** Sent on every request (an Authorization header, an account). */
  headers?: HeadersInit;
}

/** The answer of the host's `POST /v1/invoke/:handler`. */
export interface InvokeResult<T> {
  data: T;
  replayed: boolean;
  traceId: string | undefined;
  requestId: string | undefined;
}

/**
 * An error the host answered (the envelope's `error`): its code (the catalogue's, or the app's own),
 * HTTP status and ids. `replayed` when it is a stored failure answered again.
 */
export class InvokeError extends OncelyError {
  override readonly code: string;
  constructor(
    code: string,
    message: string,
    readonly status: number,
    readonly traceId: string | undefined,
    readonly requestId: string | undefined,
    replayed: boolean,
  ) {
    // ACTION_FAILED only until the server's code replaces it: the base constructor takes catalogue codes.
    super('ACTION_FAILED', message, { replayed });
    this.code = code;
    this.name = 'InvokeError';
  }
}

/** A client with a base URL: `request` for any route, `invoke` for the host's handlers. */
export interface Client {
  request(path: string, init: RequestInit, options: RetryOptions & { key: KeyInput }): Promise<IdempotentResponse>;
  invoke<T = unknown>(
    handler: string,
    input: unknown,
    options: RetryOptions & { idempotencyKey: KeyInput },
  ): Promise<InvokeResult<T>>;
}

/**
 * A client of one service that retries each intent with one key.
 * @example const shop = createClient({ baseUrl: 'https://shop.example' });
 * await shop.invoke('orders.create', input, { idempotencyKey: ['ORD-1', 'create'] });
 */
export function createClient({ baseUrl, headers: common, signal, fetch, ...retry }: ClientOptions): Client {
  // Checked and read now: a bad default fails here, and a call's own options override it field by field.
  const defaults = retrySettings(retry);
  const base = String(baseUrl).replace(/\/+$/, '');
  const merged = (init: RequestInit) => {
    const headers = new Headers(common);
    new Headers(init.headers).forEach((value, name) => {
      headers.set(name, value);
    });
    return { ...init, headers };
  };
  const request: Client['request'] = (path, init, options) =>
    fetchIntent(
      `${base}${path.startsWith('/') ? path : `/${path}`}`,
      merged(init),
      { signal, fetch, ...options },
      defaults,
    );
  return {
    request,
    async invoke<T>(
      handler: string,
      input: unknown,
      { idempotencyKey, ...options }: RetryOptions & { idempotencyKey: KeyInput },
    ) {
      const { response, replayed } = await request(
        `/v1/invoke/${encodeURIComponent(handler)}`,
        { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(input ?? null) },
        { ...options, key: idempotencyKey },
      );
      const traceId = response.headers.get('oncely-trace-id') ?? undefined;
      const requestId = response.headers.get('x-request-id') ?? undefined;
      let body: { code?: number; data?: T; error?: { code?: string; message?: string } };
      try {
        body = (await response.json()) as typeof body;
      } catch {
        throw new InvokeError(
          'HANDLER_FAILED',
          `invoke ${handler}: answered ${response.status} without the host's envelope`,
          response.status,
          traceId,
          requestId,
          replayed,
        );
      }
      if (response.ok && body.code === 0) return { data: body.data as T, replayed, traceId, requestId };
      const error = body.error ?? {};
      throw new InvokeError(
        error.code ?? 'HANDLER_FAILED',
        error.message ?? `invoke ${handler} failed`,
        response.status,
        traceId,
        requestId,
        replayed,
      );
    },
  };
}
