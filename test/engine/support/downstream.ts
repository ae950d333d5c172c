/**
 * A real downstream for the reconcile tests: a payment gateway on node:http that charges once per
 * idempotency key (`POST /charges/:key`) and answers `GET /charges/:key` with the charge or 404,
 * and the charge action that calls it, with the reconcile function that asks it.
 */
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Reconcile } from '../../../src/engine/reconcile.js';

/** One charge the gateway made. */
export interface Charge {
  id: string;
  key: string;
  amount: number;
}

/** The gateway, listening: its URL, what it charged, how often each key was posted. */
export interface Gateway {
  url: string;
  charges: Map<string, Charge>;
  posts(key: string): number;
  close(): Promise<void>;
}

/** Starts the gateway on a free port of 127.0.0.1. */
export async function startGateway(): Promise<Gateway> {
  const charges = new Map<string, Charge>();
  const posts = new Map<string, number>();
  const server = createServer((req, res) => {
    const match = /^\/charges\/([^/]+)$/.exec(req.url ?? '');
    if (!match) return void res.writeHead(404).end();
    const key = decodeURIComponent(match[1] as string);
    const reply = (status: number, body: unknown) =>
      res.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify(body));
    if (req.method === 'GET') {
      const charge = charges.get(key);
      return charge ? reply(200, charge) : reply(404, { error: 'no such charge' });
    }
    let body = '';
    req.on('data', (chunk) => {
      body += chunk;
    });
    req.on('end', () => {
      posts.set(key, (posts.get(key) ?? 0) + 1);
      // The gateway's own dedupe: a second POST of a key answers the first charge.
      let charge = charges.get(key);
      if (!charge) {
        charge = { id: `ch_${charges.size + 1}`, key, amount: (JSON.parse(body) as { amount: number }).amount };
        charges.set(key, charge);
      }
      reply(200, charge);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    charges,
    posts: (key) => posts.get(key) ?? 0,
    close: () => new Promise((resolve) => server.close(() => resolve())),
  };
}

/** Charges `amount` under the call's idempotency key; answers what the action stores. */
export async function charge(url: string, key: string, amount: number): Promise<{ chargeId: string; amount: number }> {
  const res = await fetch(`${url}/charges/${encodeURIComponent(key)}`, {
    method: 'POST',
    body: JSON.stringify({ amount }),
  });
  const made = (await res.json()) as Charge;
  return { chargeId: made.id, amount: made.amount };
}

/** Asks the gateway by the record's key: the charge as the action would have stored it, or 'retry' when there is none. */
export function reconcileCharge(url: string): Reconcile {
  return async (record) => {
    const res = await fetch(`${url}/charges/${encodeURIComponent(record.key)}`);
    if (res.status === 404) return 'retry';
    if (!res.ok) return 'unknown';
    const made = (await res.json()) as Charge;
    return { value: { chargeId: made.id, amount: made.amount } };
  };
}
