import { once } from 'node:events';
import { mkdtempSync } from 'node:fs';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { expect, it } from 'vitest';
import { openHost } from '../../src/host/index.js';

const FIXTURE = fileURLToPath(new URL('./fixture', import.meta.url));

it('stops while a keep-alive connection is busy: the answer after stop() closes its connection', async () => {
  const host = await openHost(FIXTURE, join(mkdtempSync(join(tmpdir(), 'oncely-stop-')), 'app.db'));
  const port = await host.start(0);
  // A client (a load balancer's health check) whose request is under way when the host stops.
  // close() ends idle connections only; this one, answered with keep-alive, could be reused for
  // as long as the client kept asking and the host would never finish stopping.
  const socket = connect(port, '127.0.0.1');
  await once(socket, 'connect');
  let received = '';
  socket.on('data', (chunk) => {
    received += chunk;
  });
  socket.write('GET /v1/health HTTP/1.1\r\nHost: localhost\r\n');
  // sleep: time for the server to read the request's first half; nothing marks headers half read.
  await new Promise((r) => setTimeout(r, 200));
  const stopped = host.stop();
  socket.write('\r\n');
  await once(socket, 'end');
  expect(received).toMatch(/^HTTP\/1\.1 200/);
  expect(received.toLowerCase()).toContain('connection: close');
  await stopped;
  socket.destroy();
});
