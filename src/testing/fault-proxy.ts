/**
 * An HTTP proxy that breaks the channel on purpose: put it between a client and a server (or
 * between your code and its downstream) and it drops, delays, cuts or refuses the requests its
 * plan names, forwarding the rest untouched. The faults a retrying client meets in production:
 * the upstream did the work but the answer never arrived.
 */
import { createServer, request as forward, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Duration } from '../core/duration.js';
import { durationOption } from '../core/duration-option.js';
import { InvalidArgumentError } from '../core/errors.js';

/**
 * What happens to one request:
 * - 'drop-response': forwarded, the upstream answers in full, then the client's connection is
 *   destroyed before a byte of the answer reaches it (a lost response).
 * - 'cut-body': forwarded; the client gets the status, the headers and half the body, then the
 *   connection is destroyed.
 * - 'unavailable': answered 503 by the proxy, never forwarded.
 * - 'delay': forwarded after `delay`, answered normally.
 */
export type Fault = 'drop-response' | 'cut-body' | 'unavailable' | 'delay';

/** One request of the plan: the `nth` (from 1) of the requests `match` accepts (default all). */
export interface FaultRule {
  nth: number;
  fault: Fault;
  /** For 'delay': how long to hold the request before forwarding it. Default '1s'. */
  delay?: Duration;
  /** @deprecated Write `delay`; goes in 0.2.0. */
  delayMs?: number;
  /** Which requests this rule counts, e.g. `(r) => r.method === 'POST'`. Default every request. */
  match?: (request: SeenRequest) => boolean;
}

/** One request as the proxy saw it. */
export interface SeenRequest {
  /** Its number among every request the proxy received, from 1. */
  n: number;
  method: string;
  path: string;
  /** The `idempotency-key` header, if any. */
  key: string | undefined;
  /** The fault applied, if any. */
  fault?: Fault;
  /** The upstream's status, when it was forwarded and answered. */
  upstreamStatus?: number;
}

/** The proxy, listening. */
export interface FaultProxy {
  /** Base URL to send requests to instead of the target. */
  url: string;
  /** Every request in arrival order, with the fault it got. */
  requests: SeenRequest[];
  close(): Promise<void>;
}

/**
 * Starts a fault proxy on a free port of 127.0.0.1 in front of `target`.
 * @example const proxy = await faultProxy({ target: server.url, plan: [{ nth: 1, fault: 'drop-response' }] });
 */
export async function faultProxy(options: { target: string; plan?: FaultRule[] }): Promise<FaultProxy> {
  const target = new URL(options.target);
  const plan = options.plan ?? [];
  for (const rule of plan) {
    if (!Number.isInteger(rule.nth) || rule.nth < 1)
      throw new InvalidArgumentError(`a fault rule's nth must be a whole number from 1, got ${String(rule.nth)}`);
    if (!['drop-response', 'cut-body', 'unavailable', 'delay'].includes(rule.fault))
      throw new InvalidArgumentError(`unknown fault ${String(rule.fault)}`);
  }
  // Read now: a bad delay fails here, not at the request it would hold.
  const delays = new Map(
    plan
      .filter((rule) => rule.fault === 'delay')
      .map((rule) => [rule, durationOption(rule, 'delay', 'delayMs', '1s', 'a delay fault rule')]),
  );
  const counted = plan.map(() => 0);
  const requests: SeenRequest[] = [];

  const ruleFor = (seen: SeenRequest): FaultRule | undefined => {
    let chosen: FaultRule | undefined;
    plan.forEach((rule, i) => {
      if (rule.match && !rule.match(seen)) return;
      counted[i] = (counted[i] ?? 0) + 1;
      if (counted[i] === rule.nth) chosen ??= rule;
    });
    return chosen;
  };

  const server = createServer((req, res) => {
    const key = req.headers['idempotency-key'];
    const seen: SeenRequest = {
      n: requests.length + 1,
      method: req.method ?? 'GET',
      path: req.url ?? '/',
      key: Array.isArray(key) ? key[0] : key,
    };
    requests.push(seen);
    const rule = ruleFor(seen);
    if (rule) seen.fault = rule.fault;
    if (rule?.fault === 'unavailable') {
      req.resume();
      res.writeHead(503, { 'content-type': 'application/json', 'retry-after': '1' });
      res.end(JSON.stringify({ error: { code: 'UNAVAILABLE', message: 'fault proxy: 503 by plan' } }));
      return;
    }
    const go = () => pass(req, res, target, seen, rule?.fault);
    if (rule?.fault === 'delay') setTimeout(go, delays.get(rule));
    else go();
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    requests,
    close: () =>
      new Promise((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

/** Forwards one request and relays (or breaks) the answer. */
function pass(req: IncomingMessage, res: ServerResponse, target: URL, seen: SeenRequest, fault: Fault | undefined) {
  const upstream = forward(
    {
      hostname: target.hostname,
      port: target.port,
      method: req.method,
      path: `${target.pathname.replace(/\/$/, '')}${req.url ?? '/'}`,
      headers: { ...req.headers, host: target.host },
    },
    (answer) => {
      seen.upstreamStatus = answer.statusCode;
      const chunks: Buffer[] = [];
      answer.on('data', (chunk: Buffer) => chunks.push(chunk));
      answer.on('end', () => {
        // The upstream finished its work and its answer: only now is the answer lost.
        if (fault === 'drop-response') return void res.socket?.destroy();
        const body = Buffer.concat(chunks);
        const headers = { ...answer.headers };
        delete headers['transfer-encoding'];
        headers['content-length'] = String(body.length);
        res.writeHead(answer.statusCode ?? 502, headers);
        if (fault === 'cut-body') {
          res.write(body.subarray(0, Math.floor(body.length / 2)));
          // Let the half reach the client, then break the connection before the rest.
          return void setTimeout(() => res.socket?.destroy(), 20);
        }
        res.end(body);
      });
    },
  );
  upstream.on('error', (error) => {
    if (res.headersSent) return void res.socket?.destroy();
    res.writeHead(502, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ error: { code: 'UPSTREAM_UNREACHABLE', message: `fault proxy: ${error.message}` } }));
  });
  req.pipe(upstream);
}
