import { ERRORS } from '../core/errors.js';
import type { RequestHeaders } from './gate.js';
import { problem } from './problem.js';
import type { HttpResponse } from './response.js';

/**
 * The fetch-standard (`Request`/`Response`) half shared by the adapters built on it: Hono and
 * `oncely/fetch`. Reading bodies up to a limit, capturing a handler's `Response`, and answering one.
 */

/**
 * The headers the gate reads: trace and request ids, and the W3C trace context and baggage (what
 * the application's propagator may extract). A few lookups rather than a copy of every header of
 * every request.
 */
export function idHeaders(get: (name: string) => string | undefined | null): RequestHeaders {
  return {
    'oncely-trace-id': get('oncely-trace-id') ?? undefined,
    'x-request-id': get('x-request-id') ?? undefined,
    traceparent: get('traceparent') ?? undefined,
    tracestate: get('tracestate') ?? undefined,
    baggage: get('baggage') ?? undefined,
  };
}

const EMPTY = new Uint8Array(0);

/**
 * The request body as exact bytes (its own ArrayBuffer), or undefined as soon as it is over `limit`.
 * The rest is left unread, not cancelled: cancelling the stream would destroy the socket under
 * @hono/node-server before the 413 is written; it drains and closes the connection after the answer.
 */
export async function readBody(req: Request, limit: number): Promise<Uint8Array<ArrayBuffer> | undefined> {
  if (req.body === null) return EMPTY;
  const reader = req.body.getReader();
  const read = await readUpTo(reader, limit);
  if (read.over) {
    reader.releaseLock();
    return undefined;
  }
  const bytes = new Uint8Array(read.size);
  let at = 0;
  for (const chunk of read.chunks) {
    bytes.set(chunk, at);
    at += chunk.byteLength;
  }
  return bytes;
}

/** Reads a stream until it ends or holds more than `limit` bytes (`over`: the chunk past it is among `chunks`). */
async function readUpTo(
  reader: ReadableStreamDefaultReader<Uint8Array>,
  limit: number,
): Promise<{ chunks: Uint8Array[]; size: number; over: boolean }> {
  const chunks: Uint8Array[] = [];
  let size = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) return { chunks, size, over: false };
    chunks.push(value);
    size += value.byteLength;
    if (size > limit) return { chunks, size, over: true };
  }
}

/** Path and query of an absolute URL, without parsing it: the part after the authority. */
export function targetOf(url: string): string {
  const slash = url.indexOf('/', url.indexOf('//') + 2);
  return slash === -1 ? '/' : url.slice(slash);
}

/** A captured response: whole (stored), or streamed or too big (`passThrough` sends it as it comes). */
export type Captured =
  | { response: HttpResponse; complete: true }
  | { response: HttpResponse; complete: false; passThrough: Response };

/** Reads a response body up to `limit` bytes; a stream or a bigger body is passed through whole, unstored. */
export async function capture(res: Response, limit: number): Promise<Captured> {
  const headers: Record<string, string> = {};
  res.headers.forEach((value, name) => {
    headers[name] = value;
  });
  const response = { status: res.status, headers, body: new Uint8Array() };
  if (/text\/event-stream/i.test(headers['content-type'] ?? ''))
    return res.body ? { response, complete: false, passThrough: res } : { response, complete: true };
  const held = heldBody(res);
  if (held !== undefined) {
    const bytes = typeof held === 'string' ? Buffer.from(held) : Buffer.from(held ?? EMPTY);
    if (bytes.byteLength > limit) return { response, complete: false, passThrough: res };
    response.body = bytes;
    return { response, complete: true };
  }
  if (!res.body) return { response, complete: true };
  const reader = res.body.getReader();
  const { chunks, over } = await readUpTo(reader, limit);
  if (over) {
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
  response.body = Buffer.concat(chunks);
  return { response, complete: true };
}

// The symbol @hono/node-server's own Response keeps `[status, body, headers]` under, found on the first one.
let heldKey: symbol | undefined;

/**
 * The body of @hono/node-server's own Response when it holds it as given (a string, bytes or none),
 * as node-server writes it; undefined for any other Response or body. Asking for `body` would build
 * an undici Response and a web stream (about 10 µs) just for it to be read back here.
 */
function heldBody(res: Response): string | Uint8Array | null | undefined {
  heldKey ??= Object.getOwnPropertySymbols(res).find((key) => key.description === 'cache');
  const held = heldKey === undefined ? undefined : (res as unknown as Record<symbol, unknown>)[heldKey];
  if (!Array.isArray(held) || held.length !== 3) return undefined;
  const body: unknown = held[1];
  return body === null || typeof body === 'string' || body instanceof Uint8Array ? body : undefined;
}

/** The response to send after `finish`: the stored one, or the pass-through with the gate's headers added. */
export function sentResponse(captured: Captured, sent: HttpResponse): Response {
  return captured.complete ? toResponse(sent) : withHeaders(captured.passThrough, sent.headers);
}

export function toResponse(response: HttpResponse): Response {
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

const decoder = new TextDecoder();

/**
 * The body as the gate hashes it: JSON parsed when the type says JSON, else the text (undefined when
 * empty). `invalid` when a JSON body does not parse: the handler could not read it either.
 */
export function parseBody(
  bytes: Uint8Array,
  contentType: string | undefined | null,
): { body: unknown; text: string } | 'invalid' {
  const text = bytes.byteLength === 0 ? '' : decoder.decode(bytes);
  if (text === '') return { body: undefined, text };
  if (!/json/i.test(contentType ?? '')) return { body: text, text };
  try {
    return { body: JSON.parse(text), text };
  } catch {
    return 'invalid';
  }
}

/** The 400 of a JSON body that does not parse: answered before the handler runs, never stored. */
export function invalidBody(): HttpResponse {
  return problem(ERRORS.BODY_INVALID.status, 'BODY_INVALID', 'Request body is not valid JSON', 'Send a JSON body.');
}
