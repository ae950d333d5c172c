import { OutgoingMessage, ServerResponse } from 'node:http';
import type { Execution } from '../http/gate.js';
import { type HttpResponse, normalizeHeaders } from '../http/response.js';

type Callback = (error?: Error | null) => void;
type Chunk = string | Uint8Array;
type State = 'holding' | 'streaming' | 'ending';

/** The response methods a hold takes over while it holds. */
const METHODS = ['write', 'end', 'writeHead', 'flushHeaders', 'setHeader', 'appendHeader', 'removeHeader'] as const;
type Originals = Pick<ServerResponse, (typeof METHODS)[number]>;

/** Where a response being held keeps its hold; undefined once its response is sent. */
const HOLD = Symbol('oncely.hold');
type Held = ServerResponse & { [HOLD]?: Hold | undefined };

const EMPTY = Buffer.alloc(0);
type Headers = HttpResponse['headers'];
const NO_HEADERS: Headers = {};

/**
 * Holds what a handler writes to `res` until its record is written, then sends it.
 * A body over `limit` bytes or a `text/event-stream` response stops being held: what was held goes
 * out, the rest passes straight through, and the record says RESPONSE_NOT_STORED, never half a body.
 *
 * The seven methods are replaced once per Express app (on its response prototype), by functions
 * that act for the hold of the response they are called on and pass straight through without
 * one: patching each response cost about 13 µs a request (seven closures and their installation).
 * A response whose methods another middleware already wrapped on the response itself (compression)
 * gets the same functions on itself, around those wrappers.
 * @example holdResponse(res, gate.maxBodyBytes, start.run); next();
 */
export function holdResponse(res: ServerResponse, limit: number, run: Execution): void {
  const held = res as Held;
  const proto = Object.getPrototypeOf(res) as object;
  // Node's own prototype is never patched: only an app's (Express gives each app its own).
  const shared = !wrappedOnItself(res) && proto !== ServerResponse.prototype;
  const original = shared ? (patched.get(proto) ?? patch(proto, true)) : patch(res, false);
  held[HOLD] = new Hold(held, limit, run, original);
  // One listener shared by every response, rather than a closure and a once() wrapper for each.
  res.on('close', leftEarly);
}

/** Whether another middleware replaced one of the seven methods on `res` itself. */
function wrappedOnItself(res: ServerResponse): boolean {
  for (const name of METHODS) if (Object.hasOwn(res, name)) return true;
  return false;
}

/**
 * The response closed: before it ended, the client left. The handler still answers (into a closed
 * socket), and that answer is stored for the client's retry; one that never answers is released
 * after a lease. A response sent (no hold left) or ending closes as it should.
 */
function leftEarly(this: Held): void {
  this[HOLD]?.closed();
}

/** The originals behind each patched prototype, in the order patch found them. */
const patched = new WeakMap<object, Originals>();

/**
 * Replaces the seven methods and headersSent on `target`: an app's response prototype (`shared`,
 * remembered), or one response. Returns what they were.
 */
function patch(target: object, shared: boolean): Originals {
  const self = target as Originals;
  const original: Originals = {
    write: self.write,
    end: self.end,
    writeHead: self.writeHead,
    flushHeaders: self.flushHeaders,
    setHeader: self.setHeader,
    appendHeader: self.appendHeader,
    removeHeader: self.removeHeader,
  };
  const sent = headersSentGetter(target);
  const define = (name: string, value: unknown) =>
    Object.defineProperty(target, name, { value, writable: true, configurable: true, enumerable: false });
  // Explicit parameters rather than rest arrays: setHeader runs several times per response.
  define('write', function write(this: Held, chunk: Chunk, encoding?: BufferEncoding | Callback, callback?: Callback) {
    const hold = this[HOLD];
    if (hold?.intercepting) return hold.write(chunk, encoding, callback);
    return Reflect.apply(original.write, this, [chunk, encoding, callback]);
  });
  define(
    'end',
    function end(this: Held, chunk?: Chunk | Callback, encoding?: BufferEncoding | Callback, cb?: Callback) {
      const hold = this[HOLD];
      return hold ? hold.end(chunk, encoding, cb) : Reflect.apply(original.end, this, [chunk, encoding, cb]);
    },
  );
  define('writeHead', function writeHead(this: Held, status: number, reason?: unknown, headers?: unknown) {
    const hold = this[HOLD];
    if (hold?.intercepting) return hold.writeHead(status, reason, headers);
    return Reflect.apply(original.writeHead, this, [status, reason, headers]);
  });
  define('flushHeaders', function flushHeaders(this: Held) {
    const hold = this[HOLD];
    if (hold?.intercepting) hold.flushHeaders();
    else Reflect.apply(original.flushHeaders, this, []);
  });
  // Once the handler has ended, its response is decided: a late error handler that ignores
  // headersSent must not turn it into a 500 with the stored body's length (bare Node would throw).
  define('setHeader', function setHeader(this: Held, name: string, value: unknown) {
    return this[HOLD]?.frozen ? this : Reflect.apply(original.setHeader, this, [name, value]);
  });
  define('appendHeader', function appendHeader(this: Held, name: string, value: unknown) {
    return this[HOLD]?.frozen ? this : Reflect.apply(original.appendHeader, this, [name, value]);
  });
  define('removeHeader', function removeHeader(this: Held, name: string) {
    if (!this[HOLD]?.frozen) Reflect.apply(original.removeHeader, this, [name]);
  });
  // The handler sees headersSent as it would without us, so Express's error handler cuts the
  // connection instead of writing a 500 over a half response.
  Object.defineProperty(target, 'headersSent', {
    configurable: true,
    get(this: Held) {
      const hold = this[HOLD];
      return hold?.intercepting ? hold.committed : sent.call(this);
    },
  });
  if (shared) patched.set(target, original);
  return original;
}

/** The headersSent getter `target` has now (Node's, on OutgoingMessage.prototype, unless something replaced it). */
function headersSentGetter(target: object): (this: ServerResponse) => boolean {
  for (let o: object | null = target; o !== null; o = Object.getPrototypeOf(o)) {
    const get = Object.getOwnPropertyDescriptor(o, 'headersSent')?.get;
    if (get) return get as (this: ServerResponse) => boolean;
  }
  const node = Object.getOwnPropertyDescriptor(OutgoingMessage.prototype, 'headersSent')?.get;
  return node as (this: ServerResponse) => boolean;
}

/**
 * One response's hold: what the handler wrote so far and where it stands. One per executed
 * request; the patched methods of patch() call it while the response is `res[HOLD]`.
 */
class Hold {
  private readonly held: Buffer[] = [];
  private size = 0;
  private state: State = 'holding';
  /** Whether the handler has started its response (what it sees as headersSent). */
  committed = false;
  /** write, writeHead, flushHeaders and headersSent are the hold's: until it streams or sends. */
  intercepting = true;
  /** setHeader, appendHeader and removeHeader are ignored: from the handler's end until the send. */
  frozen = false;

  constructor(
    private readonly res: Held,
    private readonly limit: number,
    private readonly run: Execution,
    private readonly original: Originals,
  ) {}

  /** The response closed (leftEarly): before the handler ended it, the client left. */
  closed(): void {
    if (this.state !== 'ending') this.run.clientLeft();
  }

  writeHead(status: number, reason?: unknown, headers?: unknown): ServerResponse {
    const { res } = this;
    if (this.state === 'ending') return res;
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
    this.committed = true;
    if (isEventStream(res)) this.stream();
    return res;
  }

  flushHeaders(): void {
    this.committed = true;
    // Only an event stream needs its headers early; anything else is sent whole at the end.
    if (!isEventStream(this.res)) return;
    this.stream();
    Reflect.apply(this.original.flushHeaders, this.res, []);
  }

  write(chunk: Chunk, encoding?: BufferEncoding | Callback, callback?: Callback): boolean {
    if (typeof encoding === 'function') {
      callback = encoding;
      encoding = undefined;
    }
    if (this.state !== 'holding') {
      if (callback) process.nextTick(callback, new Error('write after end'));
      return false;
    }
    this.committed = true;
    const bytes = toBytes(chunk, encoding);
    if (bytes) {
      this.held.push(bytes);
      this.size += bytes.length;
    }
    if (this.size > this.limit || isEventStream(this.res)) this.stream();
    if (callback) process.nextTick(callback);
    return true;
  }

  end(chunk?: Chunk | Callback, encoding?: BufferEncoding | Callback, callback?: Callback): ServerResponse {
    const { res, held } = this;
    if (typeof chunk === 'function') {
      callback = chunk;
      chunk = undefined;
    } else if (typeof encoding === 'function') {
      callback = encoding;
      encoding = undefined;
    }
    if (this.state === 'ending') {
      if (callback) process.nextTick(callback);
      return res;
    }
    this.committed = true;
    const last = toBytes(chunk, typeof encoding === 'string' ? encoding : undefined);
    const complete = this.state === 'holding' && this.size + (last?.length ?? 0) <= this.limit && !isEventStream(res);
    if (this.state === 'holding' && !complete) this.stream();
    this.state = 'ending';
    const body = !complete ? EMPTY : held.length === 0 ? (last ?? EMPTY) : Buffer.concat(last ? [...held, last] : held);
    const status = res.statusCode;
    const captured = { status, headers: normalizeHeaders(res.getHeaders()), body };
    if (complete) this.frozen = true;
    const chunkLeft = complete ? body : last;
    this.run.finish(captured, complete).then(
      (sent) => this.send(status, sent.headers, chunkLeft, callback),
      // The gate answers every failure itself; should it ever throw, the client still gets its response.
      () => this.send(status, NO_HEADERS, chunkLeft, callback),
    );
    return res;
  }

  /**
   * Ends the response with `chunk` once finish has answered: a held response (frozen) with the
   * status it had at its end and the headers the gate added; from here on every method is the original.
   */
  private send(status: number, headers: Headers, chunk: Chunk | undefined, callback: Callback | undefined): void {
    const { res, original } = this;
    res[HOLD] = undefined;
    if (this.frozen) {
      res.statusCode = status;
      for (const name in headers) if (!res.hasHeader(name)) res.setHeader(name, headers[name] as string | string[]);
    }
    Reflect.apply(original.end, res, [chunk, callback]);
  }

  /** Sends what was held and lets the rest through (end stays the hold's, to report the outcome). */
  private stream(): void {
    this.state = 'streaming';
    this.intercepting = false;
    for (const chunk of this.held) Reflect.apply(this.original.write, this.res, [chunk]);
    this.held.length = 0;
  }
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
