/**
 * One server process of the multi-process HTTP test: an example app (express, fastify or hono) on
 * a shared PostgreSQL schema, listening on a free port, with GET /__calls reporting how often
 * each handler ran. Prints "port <n>" once it listens.
 */
import { serve } from '@hono/node-server';
import { createOncely } from '../../src/index.js';
import { postgresStore } from '../../src/postgres/index.js';

const [framework, connectionString, schema] = process.argv.slice(2) as [string, string, string];
const once = await createOncely({ store: postgresStore({ connectionString, schema }) });
const middleware = { wait: '10s' as const };
const report = (calls: Map<string, number>) => Object.fromEntries(calls);

if (framework === 'hono') {
  const { createApp } = await import('../../examples/hono.js');
  const { app, calls } = createApp({ once, idempotency: middleware });
  app.get('/__calls', (c) => c.json(report(calls)));
  serve({ fetch: app.fetch, port: 0, hostname: '127.0.0.1' }, (info) => console.log(`port ${info.port}`));
} else if (framework === 'express') {
  const { createApp } = await import('../../examples/express.js');
  const { app, calls } = createApp({ once, idempotency: middleware });
  app.get('/__calls', (_req, res) => {
    res.json(report(calls));
  });
  const server = app.listen(0, '127.0.0.1', () => {
    const address = server.address();
    console.log(`port ${typeof address === 'object' && address ? address.port : 0}`);
  });
} else {
  const { createApp } = await import('../../examples/fastify.js');
  const { app, calls } = createApp({ once, idempotency: middleware });
  app.get('/__calls', async () => report(calls));
  await app.listen({ port: 0, host: '127.0.0.1' });
  const address = app.server.address();
  console.log(`port ${typeof address === 'object' && address ? address.port : 0}`);
}
