import type { Context, MiddlewareHandler } from 'hono';
import { routePath } from 'hono/route';
import { ERRORS } from '../core/errors.js';
import { IdempotencyGate, type IdempotencyOptions, type RequestHeaders } from '../http/gate.js';
import { problem } from '../http/problem.js';
import type { HttpResponse } from '../http/response.js';

/**
 * Idempotency-Key middleware for Hono: a covered request with a key runs its handler once; every
 * duplicate gets the stored status, headers and body with `Idempotent-Replayed: true`.
 * @example
 * app.use('/v1/*', idempotency({ once, tenant: (c) => c.req.header('x-account') }))
 */
export function idempotency(options: IdempotencyOptions<Context>): MiddlewareHandler {
  const gate = new IdempotencyGate(options);
  return async (c, next) => {
    if (!gate.covers(c.req.method)) return next();
    const headers = idHeaders(c);
    // Refused on its declared size before a byte of it is read.
    const declared = c.req.header('content-length');
    if (declared !== undefined && Number(declared) > gate.maxBodyBytes) return toResponse(gate.tooLarge(headers));
    // A declared length bounds the body already (Node's parser delivers no more than it), so it is
    // read whole through Hono, whose node server has a fast path for that; reading the web stream
    // chunk by chunk cost Hono about two thirds of its replay throughput in the bench. Chunked
    // bodies are read up to the limit only: 413 at the first chunk past it.
    const bytes =
      declared !== undefined ? new Uint8Array(await c.req.arrayBuffer()) : await readBody(c.req.raw, gate.maxBodyBytes);
    if (bytes === undefined) return toResponse(gate.tooLarge(headers));
    const text = bytes.byteLength === 0 ? '' : decoder.decode(bytes);
    // The handler reads the body from Hono's cache (c.req.json(), .text(), .arrayBuffer()), as after
    // c.req.text(): the request stream is read once. The exact bytes go first, so a binary body
    // read as arrayBuffer or blob is not decoded and re-encoded. Hono's cache holds promises.
    const cache = c.req.bodyCache as Record<string, Promise<unknown>>;
    cache.arrayBuffer = Promise.resolve(bytes.buffer);
    cache.text = Promise.resolve(text);
    let body: unknown = text === '' ? undefined : text;
    if (text !== '' && /json/i.test(c.req.header('content-type') ?? '')) {
      try {
        body = JSON.parse(text);
      } catch {
        // A body the handler could not read either: rejected before it runs, never stored.
        return toResponse(
          problem(ERRORS.BODY_INVALID.status, 'BODY_INVALID', 'Request body is not valid JSON', 'Send a JSON body.'),
        );
      }
    }
    const start = await gate.begin(c, {
      method: c.req.method,
      route: routePath(c, -1),
      target: targetOf(c.req.url),
      header: c.req.header('idempotency-key'),
      body,
      bodyBytes: bytes.byteLength,
      headers,
    });
    if (start.kind === 'pass') return next();
    if (start.kind === 'respond') return toResponse(start.response);
    await start.run.within(next);
    if (c.error) {
      await start.run.abandon(c.error);
      return;
    }
    const captured = await capture(c.res, gate.maxBodyBytes);
    const sent = await start.run.finish(captured.response, captured.complete);
    const res = captured.complete ? toResponse(sent) : withHeaders(captured.passThrough, sent.headers);
    // Hono's setter copies the handler's headers onto `res` (rebuilding it as a stream), but `res`
    // carries them already: all but repeated cookies and a handler's own expiry, which the copy restores.
    const own = c.res.headers;
    if (!own.has('set-cookie') && !own.has('idempotency-expires')) c.res = undefined;
    c.res = res;
  };
}

const decoder = new TextDecoder();

/**
 * The headers the gate reads: trace and request ids, and the W3C trace context and baggage (what
 * the application's propagator may extract). A few lookups rather than a copy of every header of
 * every request.
 */
function idHeaders(c: Context): RequestHeaders {
  return {
    'oncely-trace-id': c.req.header('oncely-trace-id'),
    'x-request-id': c.req.header('x-request-id'),
    traceparent: c.req.header('traceparent'),
    tracestate: c.req.header('tracestate'),
    baggage: c.req.header('baggage'),
  };
}
const EMPTY = new Uint8Array(0);

/**
 * The request body as exact bytes (its own ArrayBuffer), or undefined as soon as it is over `limit`.
 * The rest is left unread, not cancelled: cancelling the stream would destroy the socket under
 * @hono/node-server before the 413 is written; it drains and closes the connection after the answer.
 */
async function readBody(req: Request, limit: number): Promise<Uint8Array<ArrayBuffer> | undefined> {
  if (req.body === null) return EMPTY;
  const reader = req.body.getReader();
  const chunks: Uint8Array[] = [];
  let size = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    size += value.byteLength;
    if (size > limit) {
      reader.releaseLock();
      return undefined;
    }
    chunks.push(value);
  }
  const bytes = new Uint8Array(size);
  let at = 0;
  for (const chunk of chunks) {
    bytes.set(chunk, at);
    at += chunk.byteLength;
  }
  return bytes;
}

/** Path and query of an absolute URL, without parsing it: the part after the authority. */
function targetOf(url: string): string {
  const slash = url.indexOf('/', url.indexOf('//') + 2);
  return slash === -1 ? '/' : url.slice(slash);
}

/** Reads a response body up to `limit` bytes; a stream or a bigger body is passed through whole, unstored. */
async function capture(
  res: Response,
  limit: number,
): Promise<
  { response: HttpResponse; complete: true } | { response: HttpResponse; complete: false; passThrough: Response }
> {
  const headers: Record<string, string> = {};
  res.headers.forEach((value, name) => {
    headers[name] = value;
  });
  const response = { status: res.status, headers, body: new Uint8Array() };
  if (/text\/event-stream/i.test(headers['content-type'] ?? '') || !res.body)
    return res.body ? { response, complete: false, passThrough: res } : { response, complete: true };
  const reader = res.body.getReader();
  const chunks: Uint8Array[] = [];
  let size = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    chunks.push(value);
    size += value.byteLength;
    if (size > limit) {
      // Over the limit: what was read goes out first, then the rest as it comes.
      const rest = new ReadableStream<Uint8Array>({
        start(controller) {
          for (const chunk of chunks) controller.enqueue(chunk);
        },
        async pull(controller) {
          const next = await reader.read();
          if (next.done) controller.close();
          else controller.enqueue(next.value);
        },
        cancel: (reason) => reader.cancel(reason),
      });
      return { response, complete: false, passThrough: new Response(rest, res) };
    }
  }
  response.body = Buffer.concat(chunks);
  return { response, complete: true };
}

function toResponse(response: HttpResponse): Response {
  return new Response(
    response.status === 204 || response.status === 304 ? null : (response.body as Uint8Array<ArrayBuffer>),
    { status: response.status, headers: headersInit(response.headers) },
  );
}

/**
 * A plain record when every header is single and a content type is set: @hono/node-server then
 * writes it as is. Otherwise Headers, which repeat a header and get node-server's default type.
 */
function headersInit(headers: HttpResponse['headers']): HeadersInit {
  let plain = headers['content-type'] !== undefined;
  for (const name in headers) if (Array.isArray(headers[name])) plain = false;
  if (plain) return headers as Record<string, string>;
  const init = new Headers();
  for (const [name, value] of Object.entries(headers))
    for (const v of Array.isArray(value) ? value : [value]) init.append(name, v);
  return init;
}

function withHeaders(res: Response, headers: HttpResponse['headers']): Response {
  const copy = new Response(res.body, res);
  for (const [name, value] of Object.entries(headers))
    if (!copy.headers.has(name) && typeof value === 'string') copy.headers.set(name, value);
  return copy;
}
