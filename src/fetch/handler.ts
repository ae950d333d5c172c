import { IdempotencyGate, type IdempotencyOptions } from '../http/gate.js';
import {
  capture,
  idHeaders,
  invalidBody,
  parseBody,
  readBody,
  sentResponse,
  targetOf,
  toResponse,
} from '../http/web.js';

/** Options of `oncely/fetch`: the gate's, on the fetch `Request`, and the route the handler serves. */
export interface FetchIdempotencyOptions extends IdempotencyOptions<Request> {
  /**
   * The route pattern this handler serves (`'/orders/[id]/charge'`, `'/orders/:id/charge'`): keys
   * are scoped by it, and the request target joins the fingerprint, so one key on two resources of
   * the route is KEY_REUSED. Default: the request's path, so keys are scoped per concrete path.
   */
  route?: string;
}

/** Any fetch-style handler: Next.js route handlers, Bun.serve, Deno.serve, Workers, Hono's app.fetch. */
export type FetchHandler<Args extends unknown[] = []> = (
  request: Request,
  ...args: Args
) => Response | Promise<Response>;

/**
 * Wraps a fetch-style handler with the Idempotency-Key gate: a covered request with a key runs the
 * handler once; every duplicate gets the stored status, headers and body with
 * `Idempotent-Replayed: true`. The handler gets the request object it was given (a Next.js
 * `NextRequest` stays one), its body still unread. Extra arguments (Next.js's `{ params }`, a
 * Worker's `env`) pass through.
 * @example export const POST = idempotent(createOrder, { once, route: '/orders' });
 */
export function idempotent<Args extends unknown[]>(
  handler: FetchHandler<Args>,
  options: FetchIdempotencyOptions,
): (request: Request, ...args: Args) => Promise<Response> {
  const gate = new IdempotencyGate<Request>(options);
  const { route } = options;
  return async (request, ...args) => {
    if (!gate.covers(request.method)) return handler(request, ...args);
    const { headers: given } = request;
    const headers = idHeaders((name) => given.get(name));
    const declared = given.get('content-length');
    if (declared !== null && Number(declared) > gate.maxBodyBytes) return toResponse(gate.tooLarge(headers));
    // The gate reads a copy (a tee of the stream), so the handler reads its own request as usual.
    const bytes = await readBody(request.clone(), gate.maxBodyBytes);
    if (bytes === undefined) return toResponse(gate.tooLarge(headers));
    const parsed = parseBody(bytes, given.get('content-type'));
    if (parsed === 'invalid') return toResponse(invalidBody());
    const target = targetOf(request.url);
    const query = target.indexOf('?');
    const start = await gate.begin(request, {
      method: request.method,
      route: route ?? (query === -1 ? target : target.slice(0, query)),
      target,
      header: given.get('idempotency-key') ?? undefined,
      body: parsed.body,
      bodyBytes: bytes.byteLength,
      headers,
    });
    if (start.kind === 'pass') return handler(request, ...args);
    if (start.kind === 'respond') return toResponse(start.response);
    let res: Response;
    try {
      res = await start.run.within(() => handler(request, ...args));
    } catch (error) {
      // The platform answers the throw (500); the key is released for a retry.
      await start.run.abandon(error);
      throw error;
    }
    const captured = await capture(res, gate.maxBodyBytes);
    return sentResponse(captured, await start.run.finish(captured.response, captured.complete));
  };
}
