/**
 * A fake payment gateway on node:http for the storm: `POST /charges` charges once per
 * `idempotency-key` (a repeat answers the first charge) and keeps every charge by order, so a
 * second charge of one order under another key shows. `holdFirst` makes it charge one order's first
 * request and never answer it, for the storm to kill the host mid-call.
 */
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';

/** The gateway, listening. */
export interface FakeGateway {
  url: string;
  /** Charge ids made per order (distinct charges, whatever their keys). */
  chargesOf(orderId: string): string[];
  /** How often a key was posted. */
  posts(key: string): number;
  /** Resolves once the first charge request of `orderId` was charged; that request is never answered. */
  holdFirst(orderId: string): Promise<void>;
  close(): Promise<void>;
}

/** Starts the gateway on a free port of 127.0.0.1. */
export async function startGateway(): Promise<FakeGateway> {
  const byKey = new Map<string, string>();
  const byOrder = new Map<string, string[]>();
  const posts = new Map<string, number>();
  const held = new Map<string, () => void>();
  const server = createServer((req, res) => {
    if (req.method !== 'POST' || req.url !== '/charges') return void res.writeHead(404).end();
    const key = String(req.headers['idempotency-key'] ?? '');
    let body = '';
    req.on('data', (chunk) => {
      body += chunk;
    });
    req.on('end', () => {
      const { orderId } = JSON.parse(body) as { orderId: string };
      posts.set(key, (posts.get(key) ?? 0) + 1);
      let id = byKey.get(key);
      if (!id) {
        id = `ch_${byKey.size + 1}`;
        byKey.set(key, id);
        byOrder.set(orderId, [...(byOrder.get(orderId) ?? []), id]);
      }
      const hold = held.get(orderId);
      if (hold) {
        held.delete(orderId);
        // Charged, never answered: the caller dies waiting.
        return hold();
      }
      res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ id, orderId }));
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    chargesOf: (orderId) => byOrder.get(orderId) ?? [],
    posts: (key) => posts.get(key) ?? 0,
    holdFirst: (orderId) => new Promise((resolve) => held.set(orderId, resolve)),
    close: () =>
      new Promise((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
