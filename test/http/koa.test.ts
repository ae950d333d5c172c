import type { AddressInfo } from 'node:net';
import { inject } from 'light-my-request';
import { createApp } from '../../examples/koa.js';
import { describeHttpSuite, type HttpHarness, type SuiteResponse } from './suite.js';

const flatten = (headers: Record<string, unknown>) => {
  const flat: Record<string, string> = {};
  for (const [name, value] of Object.entries(headers))
    if (value !== undefined) flat[name] = Array.isArray(value) ? value.join(', ') : String(value);
  return flat;
};

/** In process through light-my-request on Koa's own callback; listening on a real port. */
const harness: HttpHarness = {
  async start({ once, listen, middleware }) {
    const { app, calls } = createApp({ once, idempotency: middleware });
    if (!listen) {
      const callback = app.callback();
      return {
        calls,
        async request({ method, path, headers, body }): Promise<SuiteResponse> {
          const res = await inject(callback, {
            method: method as 'POST',
            url: path,
            headers,
            payload: body === undefined ? undefined : JSON.stringify(body),
          });
          return { status: res.statusCode, headers: flatten(res.headers), body: res.payload };
        },
        close: async () => {},
      };
    }
    const server = app.listen(0, '127.0.0.1');
    await new Promise<void>((resolve) => server.once('listening', resolve));
    const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    return {
      calls,
      async request({ method, path, headers, body }): Promise<SuiteResponse> {
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
  },
};

describeHttpSuite('koa', harness);
