import type { AddressInfo } from 'node:net';
import type { Express } from 'express';
import { inject } from 'light-my-request';
import type { RunningApp, SuiteRequest, SuiteResponse } from './suite.js';

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
export async function serve(app: Express, listen: boolean): Promise<Omit<RunningApp, 'calls'> & { base: string }> {
  if (!listen) {
    return {
      base: '',
      async request({ method, path, headers, body }: SuiteRequest): Promise<SuiteResponse> {
        const res = await inject(isolate(app), {
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
  const server = app.listen(0, '127.0.0.1');
  await new Promise<void>((resolve) => server.once('listening', resolve));
  const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return {
    base,
    async request({ method, path, headers, body }: SuiteRequest): Promise<SuiteResponse> {
      const res = await fetch(`${base}${path}`, {
        method,
        headers,
        body: body === undefined ? undefined : JSON.stringify(body),
      });
      const flat: Record<string, string> = {};
      res.headers.forEach((value, name) => {
        flat[name] = value;
      });
      return { status: res.status, headers: flat, body: await res.text() };
    },
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
