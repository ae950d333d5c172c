import { type ServerType, serve } from '@hono/node-server';
import { createApp } from '../../examples/fetch.js';
import { describeBodyLimits } from './bodies.js';
import { describeHttpSuite, type HttpHarness, readResponse } from './suite.js';

/** In process: the handler is called with a `Request` directly, as Next.js, Bun or a Worker calls it. */
const harness: HttpHarness = {
  async start({ once, listen, middleware }) {
    const { fetch: handle, calls } = createApp({ once, idempotency: middleware });
    let server: ServerType | undefined;
    let base = 'http://localhost';
    if (listen) {
      const port = await new Promise<number>((resolve) => {
        server = serve({ fetch: handle, port: 0, hostname: '127.0.0.1' }, (info) => resolve(info.port));
      });
      base = `http://127.0.0.1:${port}`;
    }
    return {
      calls,
      async request({ method, path, headers, body }) {
        const init = { method, headers, body: body === undefined ? undefined : JSON.stringify(body) };
        return readResponse(
          listen ? await fetch(`${base}${path}`, init) : await handle(new Request(`${base}${path}`, init)),
        );
      },
      close: () => new Promise<void>((resolve) => (server ? server.close(() => resolve()) : resolve())),
    };
  },
};

describeHttpSuite('fetch', harness);

describeBodyLimits('fetch', async (once) => {
  const { fetch: handle } = createApp({ once });
  let server: ServerType | undefined;
  const port = await new Promise<number>((resolve) => {
    server = serve({ fetch: handle, port: 0, hostname: '127.0.0.1' }, (info) => resolve(info.port));
  });
  return {
    base: `http://127.0.0.1:${port}`,
    close: () => new Promise<void>((resolve) => (server ? server.close(() => resolve()) : resolve())),
  };
});
