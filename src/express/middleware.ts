import type { NextFunction, Request, RequestHandler, Response } from 'express';
import { IdempotencyGate, type IdempotencyOptions, type RequestFacts } from '../http/gate.js';
import type { HttpResponse } from '../http/response.js';
import { holdResponse } from './capture.js';

/**
 * Idempotency-Key middleware for Express: a covered request with a key runs its handler once; every
 * duplicate gets the stored status, headers and body with `Idempotent-Replayed: true`. Mount it
 * after `express.json()` and on each route, so the action is the route pattern; mounted app-wide,
 * the pattern is not known yet and keys are scoped per concrete path instead.
 * @example app.post('/orders/:id/charge', idempotency({ once, tenant: (req) => req.get('x-account') }), charge)
 */
export function idempotency(options: IdempotencyOptions<Request>): RequestHandler {
  const gate = new IdempotencyGate<Request>(options);
  return function idempotencyKey(req: Request, res: Response, next: NextFunction): void {
    if (!gate.covers(req.method)) {
      next();
      return;
    }
    gate.begin(req, factsOf(req)).then((start) => {
      if (start.kind === 'pass') next();
      else if (start.kind === 'respond') send(res, start.response);
      else {
        holdResponse(res, gate.maxBodyBytes, start.run);
        start.run.within(next);
      }
    }, next);
  };
}

/** What the gate needs of an Express request (also the NestJS interceptor's, on the Express platform). */
export function factsOf(req: Request): RequestFacts {
  const length = req.headers['content-length'];
  return {
    method: req.method,
    route: req.baseUrl + (req.route ? String(req.route.path) : req.path),
    // As sent, before any mount point is stripped from req.url.
    target: req.originalUrl,
    header: req.headers['idempotency-key'],
    body: req.body,
    bodyBytes: length ? Number(length) : undefined,
    headers: req.headers,
  };
}

/** Sends a replay or a problem as it was stored: setHeader, not res.set, which would add a charset. */
export function send(res: Response, response: HttpResponse): void {
  res.statusCode = response.status;
  const { headers } = response;
  for (const name in headers) res.setHeader(name, headers[name] as string | string[]);
  res.end(response.body);
}
