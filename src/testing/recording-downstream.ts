/**
 * A downstream double on node:http that behaves like a payment gateway or mailer with its own
 * idempotency: a write carrying a key it has seen answers the first effect again instead of making
 * a second. It records every call, so a test can assert "the downstream saw one charge" however
 * often the caller retried.
 */
import { createServer, type IncomingHttpHeaders } from 'node:http';
import type { AddressInfo } from 'node:net';

/** One request the downstream received. */
export interface DownstreamCall {
  method: string;
  path: string;
  /** The idempotency key it carried (see `keyOf`), or undefined. */
  key: string | undefined;
  /** The parsed JSON body, or the raw text when it is not JSON. */
  body: unknown;
  /** Whether this call made a new effect (false: a repeat of a key, answered from the first). */
  fresh: boolean;
}

/** One effect the downstream made: its id, the key it was made under (if any) and the body. */
export interface DownstreamEffect {
  id: string;
  key: string | undefined;
  body: unknown;
}

/** Options of `recordingDownstream`. */
export interface RecordingDownstreamOptions {
  /** Where a request's key is: default the `idempotency-key` header. */
  keyOf?: (request: { method: string; path: string; headers: IncomingHttpHeaders }) => string | undefined;
  /** The JSON answer of an effect. Default `{ id, key }` with the body's fields. */
  answer?: (effect: DownstreamEffect) => unknown;
}

/** The downstream, listening. */
export interface RecordingDownstream {
  url: string;
  /** Every call in arrival order. */
  calls: DownstreamCall[];
  /** Every effect made: one per distinct key, plus one per call without a key. */
  effects: DownstreamEffect[];
  /** How many calls carried `key`. */
  callsWith(key: string): number;
  close(): Promise<void>;
}

/**
 * Starts the downstream on a free port of 127.0.0.1. Any POST, PUT or PATCH is an effect; a GET
 * with a known key answers its effect (a reconciler's lookup), 404 otherwise.
 * @example const gateway = await recordingDownstream(); ... expect(gateway.effects).toHaveLength(1);
 */
export async function recordingDownstream(options: RecordingDownstreamOptions = {}): Promise<RecordingDownstream> {
  const keyOf = options.keyOf ?? ((r) => header(r.headers['idempotency-key']));
  const answer = options.answer ?? ((e) => ({ ...(isObject(e.body) ? e.body : {}), id: e.id, key: e.key }));
  const calls: DownstreamCall[] = [];
  const effects: DownstreamEffect[] = [];
  const byKey = new Map<string, DownstreamEffect>();
  const server = createServer((req, res) => {
    const method = req.method ?? 'GET';
    const path = req.url ?? '/';
    const key = keyOf({ method, path, headers: req.headers });
    let text = '';
    req.setEncoding('utf8');
    req.on('data', (chunk: string) => {
      text += chunk;
    });
    req.on('end', () => {
      const reply = (status: number, body: unknown) =>
        res.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify(body));
      const body = parse(text);
      if (method === 'GET' || method === 'HEAD') {
        calls.push({ method, path, key, body, fresh: false });
        const known = key === undefined ? undefined : byKey.get(key);
        return known ? reply(200, answer(known)) : reply(404, { error: 'no effect under this key' });
      }
      const known = key === undefined ? undefined : byKey.get(key);
      calls.push({ method, path, key, body, fresh: !known });
      if (known) return reply(200, answer(known));
      const effect: DownstreamEffect = { id: `eff_${effects.length + 1}`, key, body };
      effects.push(effect);
      if (key !== undefined) byKey.set(key, effect);
      reply(201, answer(effect));
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    calls,
    effects,
    callsWith: (key) => calls.filter((c) => c.key === key).length,
    close: () =>
      new Promise((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

function header(value: string | string[] | undefined): string | undefined {
  return Array.isArray(value) ? value[0] : value;
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function parse(text: string): unknown {
  if (text === '') return undefined;
  try {
    return JSON.parse(text);
  } catch {
    return text;
  }
}
