import { type ServerType, serve } from '@hono/node-server';
import { createApp } from '../../examples/hono.js';
import { describeBodyLimits } from './bodies.js';
import { describeHttpSuite, type HttpHarness, readResponse } from './suite.js';

const harness: HttpHarness = {
  async start({ once, listen, middleware }) {
    const { app, calls } = createApp({ once, idempotency: middleware });
    let server: ServerType | undefined;
    let base = 'http://localhost';
    if (listen) {
      const port = await new Promise<number>((resolve) => {
        server = serve({ fetch: app.fetch, port: 0, hostname: '127.0.0.1' }, (info) => resolve(info.port));
      });
      base = `http://127.0.0.1:${port}`;
    }
    return {
      calls,
      async request({ method, path, headers, body }) {
        const init = { method, headers, body: body === undefined ? undefined : JSON.stringify(body) };
        return readResponse(listen ? await fetch(`${base}${path}`, init) : await app.request(path, init));
      },
      close: () => new Promise<void>((resolve) => (server ? server.close(() => resolve()) : resolve())),
    };
  },
};

describeHttpSuite('hono', harness);

describeBodyLimits('hono', async (once) => {
  const { app } = createApp({ once });
  let server: ServerType | undefined;
  const port = await new Promise<number>((resolve) => {
    server = serve({ fetch: app.fetch, port: 0, hostname: '127.0.0.1' }, (info) => resolve(info.port));
  });
  return {
    base: `http://127.0.0.1:${port}`,
    close: () => new Promise<void>((resolve) => (server ? server.close(() => resolve()) : resolve())),
  };
});
