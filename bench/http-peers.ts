/**
 * The peers a user of Express would pick instead, on the same Redis as the oncely row, each
 * around the same orders route (bench/http-apps.ts startExpressWith): express-idempotency with
 * express-idempotency-redis-adapter, mounted on the route as its README shows, and
 * @node-idempotency/core with @node-idempotency/storage-adapter-redis, wired into Express as the
 * core's README shows (onRequest before the handler, onResponse with the handler's response):
 * its own Express package is not published.
 */
import { Idempotency } from '@node-idempotency/core';
import { RedisStorageAdapter } from '@node-idempotency/storage-adapter-redis';
import type { NextFunction, Request, Response } from 'express';
import { getSharedIdempotencyService, idempotency } from 'express-idempotency';
import redisAdapter from 'express-idempotency-redis-adapter';
import { type RunningApp, startExpressWith } from './http-apps.js';

export const PEERS = ['express-idempotency', '@node-idempotency/core'] as const;
export type Peer = (typeof PEERS)[number];

/** Starts `peer`'s app on Redis at `url`; closing it closes its Redis client too. */
export async function startPeer(peer: Peer, url: string): Promise<RunningApp> {
  if (peer === 'express-idempotency') {
    // A CommonJS module whose class is its `default` export: Node hands the whole module as default.
    const adapter = new redisAdapter.default({ connectionConfig: { url } });
    await adapter.connect();
    const guard = idempotency({ dataAdapter: adapter });
    // Made by idempotency() above: the service the handler asks whether the middleware answered.
    const service = getSharedIdempotencyService();
    const app = await startExpressWith([guard], (req) => service.isHit(req));
    return { port: app.port, close: () => app.close().then(() => adapter.disconnect()) };
  }
  const storage = new RedisStorageAdapter({ url });
  await storage.connect();
  const app = await startExpressWith([nodeIdempotency(new Idempotency(storage))]);
  return { port: app.port, close: () => app.close().then(() => storage.disconnect()) };
}

/** Headers the replay sends back as the first response had them. */
const KEPT = ['content-type', 'location'];

/**
 * The core's README flow in Express: a stored response is sent as it was; a new request runs
 * the handler, whose response is stored (onResponse) before it is sent, so a retry after it
 * sees it. Errors (in progress, fingerprint mismatch) go to Express's error handler.
 */
function nodeIdempotency(idempotencyCore: Idempotency) {
  return (req: Request, res: Response, next: NextFunction): void => {
    const params = { headers: req.headers, path: req.path, method: req.method, body: req.body };
    idempotencyCore.onRequest<string, unknown>(params).then((cached) => {
      if (cached) {
        const { status, headers } = cached.additional as { status: number; headers: Record<string, string> };
        res.status(status).set(headers).send(cached.body);
        return;
      }
      const send = res.send;
      res.send = function stored(body: string) {
        res.send = send;
        const headers: Record<string, string> = {};
        for (const name of KEPT) headers[name] = String(res.getHeader(name));
        idempotencyCore
          .onResponse(params, { body, additional: { status: res.statusCode, headers } })
          .then(() => send.call(res, body), next);
        return res;
      } as Response['send'];
      next();
    }, next);
  };
}
