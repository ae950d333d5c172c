/**
 * Drives one app with autocannon and checks every response while it does: all three modes send
 * the same request (POST /orders, the same JSON body, x-account and a quoted Idempotency-Key) and
 * run the same checks per response, so the load generator costs the same in every mode and only
 * the server side differs.
 */
import autocannon from 'autocannon';
import { HTTP_TENANT } from './http-apps.js';
import { runId } from './setup.js';

/** bare: the app without middleware; unique: a new key per request; replay: keys already stored. */
export type Mode = 'bare' | 'unique' | 'replay';

/** The keys a middleware app has answered, with the body each got, for replays to compare with. */
export interface KeyBook {
  keys: string[];
  bodies: Map<string, string>;
}

export const newBook = (): KeyBook => ({ keys: [], bodies: new Map() });

export interface LoadResult {
  mode: Mode;
  responses: number;
  ms: number;
  reqPerSec: number;
  /** Responses that failed a check, plus connection errors and timeouts. */
  bad: number;
  /** The first few failures, to print. */
  problems: string[];
  /** CPU the server process used per response (user + system, µs), when measured. */
  serverCpu?: number;
  /** CPU the redis-server used per response (user + system, µs), on Redis. */
  redisCpu?: number;
}

export interface LoadOptions {
  port: number;
  mode: Mode;
  seconds: number;
  connections: number;
  /** unique and bare: where answered keys go; replay: the keys to send again. */
  book: KeyBook;
  /** Whether replays say so in Idempotent-Replayed (oncely does; the peers do not). */
  marksReplays?: boolean;
  /**
   * Open loop: requests started at this rate (per second, over all connections) whatever the
   * answers, so they arrive one at a time as a public API's do; without it, each connection sends
   * its next request when the last is answered (closed loop).
   */
  rate?: number;
}

const BODY = JSON.stringify({ item: 'tea', amount: 3 });
/**
 * In every key of this run: the peers' Redis keys are the request's key (no store prefix of ours),
 * so keys of an earlier run must never meet this one's; bench/http.ts deletes them by this tag.
 */
export const KEY_TAG = runId();
// A fresh key per request, unique across the whole run.
let nextKey = 0;

/** The value of a response header, whatever case the framework sent its name in. */
function header(headers: Record<string, string | string[]>, name: string): string | string[] | undefined {
  for (const key in headers) if (key.toLowerCase() === name) return headers[key];
  return undefined;
}

export async function drive(options: LoadOptions): Promise<LoadResult> {
  const { port, mode, seconds, connections, book, marksReplays = true, rate } = options;
  if (mode === 'replay' && book.keys.length === 0) throw new Error('replay needs keys answered before');
  let responses = 0;
  let bad = 0;
  const problems: string[] = [];
  const fail = (message: string) => {
    bad++;
    if (problems.length < 3) problems.push(message);
  };
  let cursor = 0;
  const pick = () =>
    mode === 'replay' ? (book.keys[cursor++ % book.keys.length] as string) : `"k${KEY_TAG}-${nextKey++}"`;
  const started = Date.now();
  const result = await autocannon({
    url: `http://127.0.0.1:${port}`,
    connections,
    pipelining: 1,
    duration: seconds,
    ...(rate === undefined ? {} : { overallRate: rate }),
    requests: [
      {
        method: 'POST',
        path: '/orders',
        body: BODY,
        setupRequest(request, context) {
          const key = pick();
          // The context lives until this connection's next request: onResponse reads the key back.
          context.key = key;
          request.headers = {
            'content-type': 'application/json',
            'x-account': HTTP_TENANT,
            'idempotency-key': key,
          };
          return request;
        },
        onResponse(status, body, context, headers) {
          responses++;
          const key = context.key as string;
          const replayed = header(headers, 'idempotent-replayed');
          // n is the handler's run count for the key: 1 on a first run, and 1 in the stored body.
          if (status !== 201 || !body.endsWith('"n":1}'))
            return fail(`${mode} ${key}: ${status} ${body.slice(0, 120)}`);
          if (mode === 'replay') {
            if (marksReplays && replayed !== 'true') return fail(`replay ${key}: no Idempotent-Replayed: true`);
            if (body !== book.bodies.get(key)) return fail(`replay ${key}: body differs from the first response`);
          } else {
            if (replayed !== undefined) return fail(`${mode} ${key}: marked replayed on a new key`);
            book.bodies.set(key, body);
            book.keys.push(key);
          }
        },
      },
    ],
  });
  const ms = result.finish.getTime() - result.start.getTime() || Date.now() - started;
  if (result.errors > 0) fail(`${mode}: ${result.errors} connection errors (${result.timeouts} timeouts)`);
  return { mode, responses, ms, reqPerSec: (responses * 1000) / ms, bad, problems };
}
