import { createServer, type RequestListener } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Express } from 'express';
import { inject } from 'light-my-request';
import { type RunningApp, readResponse, type SuiteRequest, type SuiteResponse } from './suite.js';

/**
 * light-my-request re-parents Express's request and response prototypes, which every Express app
 * in the process shares, so real sockets would then meet its fake methods. Each injected app gets
 * its own copies instead.
 */
const isolated = new WeakSet<Express>();
export function isolate(app: Express): Express {
  if (isolated.has(app)) return app;
  isolated.add(app);
  for (const name of ['request', 'response'] as const) {
    const shared = Object.getPrototypeOf(app[name]);
    Object.setPrototypeOf(
      app[name],
      Object.create(Object.getPrototypeOf(shared), Object.getOwnPropertyDescriptors(shared)),
    );
  }
  return app;
}

/** Serves an Express app in process (light-my-request) or on a real port (fetch). */
export function serve(app: Express, listen: boolean): Promise<Served> {
  return serveListener(listen ? app : isolate(app), listen);
}

/** A running server of the suite, with its base URL ('' in process). */
export type Served = Omit<RunningApp, 'calls'> & { base: string };

/** Serves any Node request listener (Express, Koa's callback) in process (light-my-request) or on a real port. */
export async function serveListener(listener: RequestListener, listen: boolean): Promise<Served> {
  if (!listen) {
    return {
      base: '',
      async request({ method, path, headers, body }: SuiteRequest): Promise<SuiteResponse> {
        const res = await inject(listener, {
          method: method as 'POST',
          url: path,
          headers,
          payload: body === undefined ? undefined : JSON.stringify(body),
        });
        const flat: Record<string, string> = {};
        for (const [name, value] of Object.entries(res.headers))
          if (value !== undefined) flat[name] = Array.isArray(value) ? value.join(', ') : String(value);
        return { status: res.statusCode, headers: flat, body: res.payload };
      },
      close: async () => {},
    };
  }
  const server = createServer(listener).listen(0, '127.0.0.1');
  await new Promise<void>((resolve) => server.once('listening', resolve));
  const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return {
    base,
    async request({ method, path, headers, body }: SuiteRequest): Promise<SuiteResponse> {
      const init = { method, headers, body: body === undefined ? undefined : JSON.stringify(body) };
      return readResponse(await fetch(`${base}${path}`, init));
    },
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
