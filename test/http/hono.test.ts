import { type ServerType, serve } from '@hono/node-server';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createApp } from '../../examples/hono.js';
import { createOncely, type Oncely } from '../../src/index.js';
import { sqliteStore } from '../../src/sqlite/index.js';
import { describeHttpSuite, type HttpHarness, postChunked, type SuiteResponse } from './suite.js';

async function read(res: Response): Promise<SuiteResponse> {
  const headers: Record<string, string> = {};
  res.headers.forEach((value, name) => {
    headers[name] = value;
  });
  return { status: res.status, headers, body: await res.text() };
}

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
        return read(listen ? await fetch(`${base}${path}`, init) : await app.request(path, init));
      },
      close: () => new Promise<void>((resolve) => (server ? server.close(() => resolve()) : resolve())),
    };
  },
};

describeHttpSuite('hono', harness);

describe('hono request bodies on a real server', () => {
  let once: Oncely;
  let server: ServerType;
  let base: string;
  beforeAll(async () => {
    once = await createOncely({ store: sqliteStore({ path: ':memory:' }) });
    const { app } = createApp({ once });
    const port = await new Promise<number>((resolve) => {
      server = serve({ fetch: app.fetch, port: 0, hostname: '127.0.0.1' }, (info) => resolve(info.port));
    });
    base = `http://127.0.0.1:${port}`;
  });
  afterAll(async () => {
    await new Promise<void>((resolve) => server.close(() => resolve()));
    await once.close();
  });
  const headers = (key: string) => ({ 'content-type': 'application/json', 'idempotency-key': key });
  const total = 20 * 1024 * 1024;

  it('defect 11.3: a chunked 20 MiB body gets 413 REQUEST_TOO_LARGE once past maxBodyBytes, not read whole', async () => {
    const answer = await postChunked(`${base}/orders`, total, { headers: headers(`chunked-${Date.now()}`) });
    // Answered while most of the body was still unsent: the server stopped reading near the limit.
    expect(answer.sent).toBeLessThan(total / 2);
    expect([answer.status, JSON.parse(answer.body).code]).toEqual([413, 'REQUEST_TOO_LARGE']);
  });

  it('defect 11.3: a declared Content-Length over maxBodyBytes gets 413 before a byte of the body is read', async () => {
    const answer = await postChunked(`${base}/orders`, total, {
      headers: headers(`declared-${Date.now()}`),
      declare: true,
    });
    expect(answer.sent).toBeLessThan(total / 2);
    expect([answer.status, JSON.parse(answer.body).code]).toEqual([413, 'REQUEST_TOO_LARGE']);
  });
});
