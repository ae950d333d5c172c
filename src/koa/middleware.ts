import type { IncomingMessage } from 'node:http';
import type { Context, Middleware } from 'koa';
import { IdempotencyGate, type IdempotencyOptions, type RequestFacts } from '../http/gate.js';
import { bufferView, type HttpResponse, normalizeHeaders } from '../http/response.js';
import { idHeaders, invalidBody, parseBody } from '../http/web.js';

/**
 * Idempotency-Key middleware for Koa: a covered request with a key runs its handler once; every
 * duplicate gets the stored status, headers and body with `Idempotent-Replayed: true`. Mount it on
 * each route of `@koa/router` (`router.post('/orders/:id/charge', idempotent, charge)`), so the
 * action is the route pattern; mounted app-wide, keys are scoped per concrete path instead. Without
 * a body parser before it, it reads a covered request's body itself and leaves it where
 * `@koa/bodyparser` would (`ctx.request.body`, parsed JSON or text, and `ctx.request.rawBody`).
 * @example router.post('/orders', idempotency({ once, tenant: (ctx) => ctx.state.account }), createOrder)
 */
export function idempotency(options: IdempotencyOptions<Context>): Middleware {
  const gate = new IdempotencyGate<Context>(options);
  return async function idempotencyKey(ctx, next) {
    if (!gate.covers(ctx.method)) return next();
    // Node's request headers read directly, as ctx.get does (an empty one is none) without its delegates.
    const sent = ctx.req.headers;
    const headers = idHeaders((name) => (sent[name] as string | undefined) || undefined);
    const declared = sent['content-length'] || '';
    if (declared !== '' && Number(declared) > gate.maxBodyBytes) return answer(ctx, gate.tooLarge(headers));
    const request = ctx.request as typeof ctx.request & { body?: unknown; rawBody?: string };
    let bodyBytes = declared === '' ? undefined : Number(declared);
    if (request.body === undefined) {
      const bytes = await readNodeBody(ctx.req, gate.maxBodyBytes);
      if (bytes === undefined) return answer(ctx, gate.tooLarge(headers));
      const parsed = parseBody(bytes, sent['content-type']);
      if (parsed === 'invalid') return answer(ctx, invalidBody());
      request.body = parsed.body;
      request.rawBody = parsed.text;
      bodyBytes = bytes.byteLength;
    }
    const facts: RequestFacts = {
      method: ctx.method,
      route: typeof ctx._matchedRoute === 'string' ? ctx._matchedRoute : ctx.path,
      target: ctx.originalUrl,
      header: sent['idempotency-key'],
      body: request.body,
      bodyBytes,
      headers,
    };
    const start = await gate.begin(ctx, facts);
    if (start.kind === 'pass') return next();
    if (start.kind === 'respond') return answer(ctx, start.response);
    try {
      await start.run.within(next);
    } catch (error) {
      // Koa answers the throw (500, or the error's status); the key is released for a retry.
      await start.run.abandon(error);
      throw error;
    }
    const captured = captureBody(ctx.body, ctx.response.get('content-type'), gate.maxBodyBytes);
    const response = {
      status: ctx.status,
      headers: normalizeHeaders(ctx.response.headers),
      body: captured ?? EMPTY,
    };
    const answered = await start.run.finish(response, captured !== undefined);
    // The stored bytes are what goes out, so the first answer and its replays are the same bytes. A
    // Buffer, which Koa sends as it is (any other object it sends as JSON).
    if (captured !== undefined && ctx.body !== null && ctx.body !== undefined) ctx.body = bufferView(captured);
    const added = answered.headers;
    for (const name in added) if (!ctx.response.get(name)) ctx.set(name, added[name] as string | string[]);
  };
}

const EMPTY = new Uint8Array(0);

/**
 * The bytes Koa will send for `body`, or undefined when it is not stored: a stream (any
 * `text/event-stream`, a Node or web stream, a Blob), or more than `limit` bytes. Objects are
 * sent as JSON.stringify makes them, as Koa does.
 */
function captureBody(body: unknown, type: string, limit: number): Uint8Array | undefined {
  if (/text\/event-stream/i.test(type)) return undefined;
  let bytes: Uint8Array;
  if (body === null || body === undefined) bytes = EMPTY;
  else if (typeof body === 'string') bytes = Buffer.from(body);
  else if (body instanceof Uint8Array) bytes = body;
  else if (isStream(body)) return undefined;
  else bytes = Buffer.from(JSON.stringify(body));
  return bytes.byteLength > limit ? undefined : bytes;
}

function isStream(body: object): boolean {
  return (
    typeof (body as { pipe?: unknown }).pipe === 'function' ||
    typeof (body as { getReader?: unknown }).getReader === 'function' ||
    body instanceof Blob ||
    body instanceof Response
  );
}

/** Answers a replay or a problem as it was stored. */
function answer(ctx: Context, response: HttpResponse): void {
  ctx.status = response.status;
  const { headers } = response;
  for (const name in headers) ctx.set(name, headers[name] as string | string[]);
  ctx.body = response.status === 204 || response.status === 304 ? null : bufferView(response.body);
}

/**
 * A Node request body up to `limit` bytes, or undefined once past it. The rest is left unread,
 * not destroyed (which would close the socket before the 413 is written): Node drains it after
 * the answer.
 */
function readNodeBody(req: IncomingMessage, limit: number): Promise<Uint8Array | undefined> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    const done = (bytes: Uint8Array | undefined) => {
      req.off('data', onData).off('end', onEnd).off('error', reject);
      resolve(bytes);
    };
    const onData = (chunk: Buffer) => {
      size += chunk.byteLength;
      if (size <= limit) return void chunks.push(chunk);
      req.pause();
      done(undefined);
    };
    const onEnd = () => done(Buffer.concat(chunks, size));
    req.on('data', onData).on('end', onEnd).on('error', reject);
  });
}
