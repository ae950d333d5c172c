import { request } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { signStandardWebhook } from '../../src/host/index.js';
import { hostTargets, type RunningHost, startHost } from '../support/host-app.js';

const SECRET = 'whsec_dGVzdC1maXh0dXJlLXNlY3JldC1rZXk=';
const MiB = 1024 * 1024;
const ATTACK_BYTES = 50 * MiB;
// What the client gets to send before the answer: the cap, plus what loopback sockets buffer (a few MiB).
const READ_BOUND = 16 * MiB;

/**
 * Streams `total` bytes to `path` in 64 KiB chunks, stopping as soon as the server answers.
 * Without `length` the body is chunked (no Content-Length); with it, that length is declared.
 */
function push(
  base: string,
  path: string,
  total: number,
  headers: Record<string, string> = {},
): Promise<{ status: number; sent: number; body: Record<string, unknown> }> {
  return new Promise((resolve, reject) => {
    let sent = 0;
    let answered = false;
    const req = request(`${base}${path}`, { method: 'POST', headers }, (res) => {
      answered = true;
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => {
        req.destroy();
        resolve({ status: res.statusCode ?? 0, sent, body: JSON.parse(Buffer.concat(chunks).toString()) });
      });
    });
    req.on('error', (error) => {
      if (!answered) reject(error);
    });
    const chunk = Buffer.alloc(64 * 1024, 'a');
    const pump = () => {
      while (!answered && sent < total) {
        sent += chunk.length;
        if (!req.write(chunk)) return void req.once('drain', pump);
      }
      if (answered) return;
      req.end();
      // Everything sent and still no answer: the server read it all (or waits for a declared rest).
      setTimeout(() => {
        if (answered) return;
        req.destroy();
        reject(new Error(`the server took ${sent} bytes without answering`));
      }, 2000).unref();
    };
    pump();
  });
}

const targets = hostTargets();
afterAll(async () => {
  for (const t of targets) await t.cleanup();
});

for (const { name, target } of targets)
  describe(`host body limits on ${name}`, () => {
    let app: RunningHost;
    let runs = 0;
    beforeAll(async () => {
      app = await startHost(target(), {
        config: {
          maxBodyBytes: 64 * 1024,
          sources: {
            hooks: { kind: 'standard-webhooks', secret: SECRET },
            small: { kind: 'standard-webhooks', secret: SECRET, maxBodyBytes: 1024 },
          },
        },
        handlers: {
          'echo.size': {
            handle: (input: { text: string }) => {
              runs++;
              return { length: input.text.length };
            },
          },
        },
      });
    });
    afterAll(() => app.stop());

    it('defect 11.3: an invoke body declared over maxBodyBytes is 413 before it is read', async () => {
      const answer = await push(app.base, '/v1/invoke/echo.size', ATTACK_BYTES, {
        'content-length': String(1024 * MiB),
        'idempotency-key': 'big-1',
      });
      expect(answer).toMatchObject({ status: 413, body: { error: { code: 'REQUEST_TOO_LARGE' } } });
      expect(answer.sent).toBeLessThan(READ_BOUND);
      expect(runs).toBe(0);
    });

    it('defect 11.3: a chunked invoke body is cut at maxBodyBytes with 413, not read whole', async () => {
      const answer = await push(app.base, '/v1/invoke/echo.size', ATTACK_BYTES, { 'idempotency-key': 'big-2' });
      expect(answer).toMatchObject({ status: 413, body: { error: { code: 'REQUEST_TOO_LARGE' } } });
      expect(answer.sent).toBeLessThan(READ_BOUND);
      expect(runs).toBe(0);
    });

    it('defect 11.3: bodies up to maxBodyBytes are served', async () => {
      const text = 'b'.repeat(60 * 1024);
      expect(await app.invoke('echo.size', { text }, { 'idempotency-key': 'fits' })).toMatchObject({
        status: 200,
        body: { data: { length: text.length } },
      });
      expect(
        (await app.invoke('echo.size', { text: `${text}${'b'.repeat(5 * 1024)}` }, { 'idempotency-key': 'over' }))
          .status,
      ).toBe(413);
    });

    it('defect 11.3: an unsigned 1 GiB webhook body is 413 before the signature check reads it', async () => {
      const declared = await push(app.base, '/v1/webhooks/hooks', ATTACK_BYTES, {
        'content-length': String(1024 * MiB),
      });
      expect(declared).toMatchObject({ status: 413, body: { error: { code: 'REQUEST_TOO_LARGE' } } });
      expect(declared.sent).toBeLessThan(READ_BOUND);
      const chunked = await push(app.base, '/v1/webhooks/hooks', ATTACK_BYTES);
      expect(chunked).toMatchObject({ status: 413, body: { error: { code: 'REQUEST_TOO_LARGE' } } });
      expect(chunked.sent).toBeLessThan(READ_BOUND);
    });

    it("defect 11.3: a source's maxBodyBytes bounds its webhooks; signed events under it are accepted", async () => {
      const send = (source: string, id: string, body: string) => {
        const at = Math.floor(Date.now() / 1000);
        return fetch(`${app.base}/v1/webhooks/${source}`, {
          method: 'POST',
          body,
          headers: {
            'webhook-id': id,
            'webhook-timestamp': String(at),
            'webhook-signature': signStandardWebhook(SECRET, id, at, body),
          },
        });
      };
      const body = JSON.stringify({ type: 'note.big', text: 'c'.repeat(2048) });
      expect((await send('small', 'evt-1', body)).status).toBe(413);
      expect((await send('hooks', 'evt-1', body)).status).toBe(200);
      expect((await send('small', 'evt-2', JSON.stringify({ type: 'note.small' }))).status).toBe(200);
    });
  });

for (const { name, target } of targets)
  describe(`host response sizes on ${name}`, () => {
    let app: RunningHost;
    let runs = 0;
    beforeAll(async () => {
      app = await startHost(target(), {
        handlers: {
          'blob.make': {
            handle: (input: { kib: number }) => {
              runs++;
              return { blob: 'r'.repeat(input.kib * 1024) };
            },
          },
        },
      });
    });
    afterAll(() => app.stop());

    it('defect 11.11: a 900 KiB response under the 1 MiB body limit is stored and replayed, not 500 RESULT_TOO_LARGE', async () => {
      const first = await app.invoke('blob.make', { kib: 900 }, { 'idempotency-key': 'blob-900' });
      expect(first.status).toBe(200);
      const again = await app.invoke('blob.make', { kib: 900 }, { 'idempotency-key': 'blob-900' });
      expect(again.status).toBe(200);
      expect(again.headers.get('idempotent-replayed')).toBe('true');
      expect(again.body).toEqual({ ...first.body, requestId: expect.any(String) });
      expect(runs).toBe(1);
    });

    it('defect 11.11: a response over the body limit reaches its client; duplicates get 409 RESPONSE_NOT_STORED', async () => {
      runs = 0;
      const first = await app.invoke('blob.make', { kib: 1100 }, { 'idempotency-key': 'blob-1100' });
      expect(first.status).toBe(200);
      expect((first.body.data as { blob: string }).blob).toHaveLength(1100 * 1024);
      const again = await app.invoke('blob.make', { kib: 1100 }, { 'idempotency-key': 'blob-1100' });
      expect(again).toMatchObject({ status: 409, body: { error: { code: 'RESPONSE_NOT_STORED' } } });
      expect(runs).toBe(1);
    });
  });
