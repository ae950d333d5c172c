import type { ServerResponse } from 'node:http';
import type { Execution } from '../http/gate.js';
import { normalizeHeaders } from '../http/response.js';

type Callback = (error?: Error | null) => void;
type Chunk = string | Uint8Array;
type State = 'holding' | 'streaming' | 'ending';

const EMPTY = Buffer.alloc(0);

/**
 * Holds what a handler writes to `res` until its record is written, then sends it.
 * A body over `limit` bytes or a `text/event-stream` response stops being held: what was held goes
 * out, the rest passes straight through, and the record says RESPONSE_NOT_STORED, never half a body.
 * @example holdResponse(res, gate.maxBodyBytes, start.run); next();
 */
export function holdResponse(res: ServerResponse, limit: number, run: Execution): void {
  // The functions as they are now: another middleware (compression) may have wrapped them already.
  const original = {
    write: res.write,
    end: res.end,
    writeHead: res.writeHead,
    flushHeaders: res.flushHeaders,
    setHeader: res.setHeader,
    appendHeader: res.appendHeader,
    removeHeader: res.removeHeader,
  };
  const held: Buffer[] = [];
  let size = 0;
  let state: State = 'holding';
  // Whether the handler has started its response: it sees headersSent as it would without us,
  // so Express's error handler cuts the connection instead of writing a 500 over a half response.
  let committed = false;
  Object.defineProperty(res, 'headersSent', { configurable: true, get: () => committed });

  const unpatch = (keepEnd: boolean) => {
    res.write = original.write;
    res.writeHead = original.writeHead;
    res.flushHeaders = original.flushHeaders;
    if (!keepEnd) res.end = original.end;
    Reflect.deleteProperty(res, 'headersSent');
  };

  // Once the handler has ended, its response is decided: a late error handler that ignores
  // headersSent must not turn it into a 500 with the stored body's length (bare Node would throw).
  const freeze = () => {
    res.setHeader = ignore as ServerResponse['setHeader'];
    res.appendHeader = ignore as ServerResponse['appendHeader'];
    res.removeHeader = ignore as ServerResponse['removeHeader'];
  };
  const thaw = () => {
    res.setHeader = original.setHeader;
    res.appendHeader = original.appendHeader;
    res.removeHeader = original.removeHeader;
  };
  function ignore() {
    return res;
  }

  const stream = () => {
    state = 'streaming';
    unpatch(true);
    for (const chunk of held) Reflect.apply(original.write, res, [chunk]);
    held.length = 0;
  };

  res.writeHead = function writeHead(status: number, reason?: unknown, headers?: unknown) {
    if (state === 'ending') return res;
    if (typeof reason === 'string') res.statusMessage = reason;
    else headers = reason;
    res.statusCode = status;
    if (Array.isArray(headers)) {
      // Node's flat form [name, value, name, value]: these replace what was set before.
      for (let i = 0; i < headers.length; i += 2) res.removeHeader(String(headers[i]));
      for (let i = 0; i + 1 < headers.length; i += 2) res.appendHeader(String(headers[i]), headers[i + 1]);
    } else if (headers && typeof headers === 'object') {
      for (const [name, value] of Object.entries(headers)) if (value !== undefined) res.setHeader(name, value);
    }
    committed = true;
    if (isEventStream(res)) stream();
    return res;
  } as ServerResponse['writeHead'];

  res.flushHeaders = function flushHeaders() {
    committed = true;
    // Only an event stream needs its headers early; anything else is sent whole at the end.
    if (!isEventStream(res)) return;
    stream();
    Reflect.apply(original.flushHeaders, res, []);
  };

  res.write = function write(chunk: Chunk, encoding?: BufferEncoding | Callback, callback?: Callback) {
    if (typeof encoding === 'function') {
      callback = encoding;
      encoding = undefined;
    }
    if (state !== 'holding') {
      if (callback) process.nextTick(callback, new Error('write after end'));
      return false;
    }
    committed = true;
    const bytes = toBytes(chunk, encoding);
    if (bytes) {
      held.push(bytes);
      size += bytes.length;
    }
    if (size > limit || isEventStream(res)) stream();
    if (callback) process.nextTick(callback);
    return true;
  } as ServerResponse['write'];

  res.end = function end(chunk?: Chunk | Callback, encoding?: BufferEncoding | Callback, callback?: Callback) {
    if (typeof chunk === 'function') {
      callback = chunk;
      chunk = undefined;
    } else if (typeof encoding === 'function') {
      callback = encoding;
      encoding = undefined;
    }
    if (state === 'ending') {
      if (callback) process.nextTick(callback);
      return res;
    }
    committed = true;
    const last = toBytes(chunk, typeof encoding === 'string' ? encoding : undefined);
    const complete = state === 'holding' && size + (last?.length ?? 0) <= limit && !isEventStream(res);
    if (state === 'holding' && !complete) stream();
    state = 'ending';
    const body = !complete ? EMPTY : held.length === 0 ? (last ?? EMPTY) : Buffer.concat(last ? [...held, last] : held);
    const status = res.statusCode;
    const captured = { status, headers: normalizeHeaders(res.getHeaders()), body };
    if (complete) freeze();
    const send = (headers: Record<string, string | string[]>) => {
      thaw();
      unpatch(false);
      if (complete) {
        res.statusCode = status;
        for (const [name, value] of Object.entries(headers)) if (!res.hasHeader(name)) res.setHeader(name, value);
      }
      Reflect.apply(original.end, res, [complete ? body : last, callback]);
    };
    run.finish(captured, complete).then(
      (sent) => send(sent.headers),
      // The gate answers every failure itself; should it ever throw, the client still gets its response.
      () => send({}),
    );
    return res;
  } as ServerResponse['end'];

  res.once('close', () => {
    // The client left before the response ended. The handler still answers (into a closed socket),
    // and that answer is stored for the client's retry; one that never answers is released after a lease.
    if (state === 'holding' || state === 'streaming') run.clientLeft();
  });
}

function isEventStream(res: ServerResponse): boolean {
  const type = res.getHeader('content-type');
  return typeof type === 'string' && type.toLowerCase().startsWith('text/event-stream');
}

function toBytes(chunk: Chunk | undefined, encoding: BufferEncoding | undefined): Buffer | undefined {
  if (chunk === undefined || chunk === null) return undefined;
  if (typeof chunk === 'string') return Buffer.from(chunk, encoding ?? 'utf8');
  return Buffer.isBuffer(chunk) ? chunk : Buffer.from(chunk);
}
