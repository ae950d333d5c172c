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
    // The body is read once, here: whole when its length is declared (the platform delivers no
    // more than that, and @hono/node-server reads it straight off the socket), else up to the limit.
    // A copy for the gate (request.clone(), a tee of the stream) cost several times the bare request.
    // (`request.body` is not asked first: on @hono/node-server that builds a stream of the socket.)
    const hasBody = declared !== null || request.body !== null;
    const bytes =
      declared !== null
        ? new Uint8Array(await request.arrayBuffer())
        : hasBody
          ? await readBody(request, gate.maxBodyBytes)
          : EMPTY;
    if (bytes === undefined) return toResponse(gate.tooLarge(headers));
    const type = given.get('content-type');
    const parsed = parseBody(bytes, type);
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
    if (start.kind === 'respond') return toResponse(start.response);
    // The handler reads the same bytes from the request it was given, as if unread.
    if (hasBody) refill(request, bytes, parsed.text, type);
    if (start.kind === 'pass') return handler(request, ...args);
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

const EMPTY = new Uint8Array(0);

const unusable = () => new TypeError('Body is unusable: it has already been read');

/** What a refilled request's body serves: the bytes the gate read, read once as a body is. */
interface Refill {
  bytes: Uint8Array<ArrayBuffer>;
  text: string;
  type: string | null;
  used: boolean;
  /** A `Response` over the bytes, made when a method other than `text()` and `json()` is first asked for. */
  held: Response | undefined;
}

const REFILL = Symbol('oncely.refill');
type Refilled = Request & { [REFILL]: Refill };

function holder(state: Refill): Response {
  state.held ??= new Response(
    state.bytes,
    state.type === null ? undefined : { headers: { 'content-type': state.type } },
  );
  return state.held;
}

const read = <T>(fast: (state: Refill) => T, slow: (r: Response) => Promise<T>) =>
  function (this: Refilled): Promise<T> {
    const state = this[REFILL];
    if (state.held !== undefined) return slow(state.held);
    if (state.used) return Promise.reject(unusable());
    state.used = true;
    try {
      return Promise.resolve(fast(state));
    } catch (error) {
      return Promise.reject(error);
    }
  };

const method = (name: 'arrayBuffer' | 'blob' | 'bytes' | 'formData') =>
  function (this: Refilled): Promise<unknown> {
    const state = this[REFILL];
    if (state.used) return Promise.reject(unusable());
    return holder(state)[name]();
  };

/** The body members of a refilled request; they read the request's own `Refill`. */
const refilledBody: PropertyDescriptorMap = {
  text: {
    configurable: true,
    writable: true,
    value: read(
      (state) => state.text,
      (r) => r.text(),
    ),
  },
  json: {
    configurable: true,
    writable: true,
    value: read(
      (state) => JSON.parse(state.text) as unknown,
      (r) => r.json(),
    ),
  },
  arrayBuffer: { configurable: true, writable: true, value: method('arrayBuffer') },
  blob: { configurable: true, writable: true, value: method('blob') },
  bytes: { configurable: true, writable: true, value: method('bytes') },
  formData: { configurable: true, writable: true, value: method('formData') },
  body: {
    configurable: true,
    get(this: Refilled) {
      return holder(this[REFILL]).body;
    },
  },
  bodyUsed: {
    configurable: true,
    get(this: Refilled) {
      const state = this[REFILL];
      return state.used || (state.held?.bodyUsed ?? false);
    },
  },
  clone: {
    configurable: true,
    writable: true,
    value(this: Refilled): Request {
      const state = this[REFILL];
      if (state.used || state.held?.bodyUsed) throw unusable();
      const { method: verb, headers, signal, url } = this;
      return new Request(url, { method: verb, headers, signal, body: state.bytes.slice() });
    },
  },
};

// One refilled prototype per kind of request (Request, NextRequest, @hono/node-server's), made once:
// defining ten members and their closures on every request cost more than the rest of the adapter.
const refilledPrototypes = new WeakMap<object, object>();

/**
 * Makes a request whose body the gate has read readable again, on the object itself (a Next.js
 * `NextRequest` stays one, of its own class): its body methods, `body` and `bodyUsed` serve `bytes`,
 * read once as a body is. `text()` and `json()` come straight from the decoded text; the others, and
 * `body`, from a `Response` over the bytes. `clone()` is a new `Request` with them.
 */
function refill(request: Request, bytes: Uint8Array<ArrayBuffer>, text: string, type: string | null): void {
  const proto = Object.getPrototypeOf(request) as object;
  let refilled = refilledPrototypes.get(proto);
  if (refilled === undefined) {
    refilled = Object.create(proto, refilledBody) as object;
    refilledPrototypes.set(proto, refilled);
  }
  (request as Refilled)[REFILL] = { bytes, text, type, used: false, held: undefined };
  Object.setPrototypeOf(request, refilled);
}
