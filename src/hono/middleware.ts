import type { Context, MiddlewareHandler } from 'hono';
import { routePath } from 'hono/route';
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
    const headers = idHeaders((name) => c.req.header(name));
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
    const parsed = parseBody(bytes, c.req.header('content-type'));
    // A body the handler could not read either: rejected before it runs, never stored.
    if (parsed === 'invalid') return toResponse(invalidBody());
    // The handler reads the body from Hono's cache (c.req.json(), .text(), .arrayBuffer()), as after
    // c.req.text(): the request stream is read once. The exact bytes go first, so a binary body
    // read as arrayBuffer or blob is not decoded and re-encoded. Hono's cache holds promises.
    const cache = c.req.bodyCache as Record<string, Promise<unknown>>;
    cache.arrayBuffer = Promise.resolve(bytes.buffer);
    cache.text = Promise.resolve(parsed.text);
    const { body } = parsed;
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
    const res = sentResponse(captured, sent);
    // Hono's setter copies the handler's headers onto `res` (rebuilding it as a stream), but `res`
    // carries them already: all but repeated cookies and a handler's own expiry, which the copy restores.
    const own = c.res.headers;
    if (!own.has('set-cookie') && !own.has('idempotency-expires')) c.res = undefined;
    c.res = res;
  };
}
