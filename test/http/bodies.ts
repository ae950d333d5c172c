import { request } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createOncely, type Oncely } from '../../src/index.js';
import { sqliteStore } from '../../src/sqlite/index.js';
import { fresh } from './suite.js';

/**
 * Posts `total` bytes in chunks (Transfer-Encoding: chunked, or a declared Content-Length with
 * `declare`), waiting for the socket to drain, and stops sending once the answer arrives. `sent`
 * is how much had been written then: a server that reads the whole body answers only after all of it.
 */
export function postChunked(
  url: string,
  total: number,
  { headers = {}, declare = false }: { headers?: Record<string, string>; declare?: boolean } = {},
): Promise<{ status: number; body: string; sent: number }> {
  const chunk = Buffer.alloc(64 * 1024, 'a');
  return new Promise((resolve, reject) => {
    let sent = 0;
    let answered = false;
    const length: Record<string, string> = declare ? { 'content-length': String(total) } : {};
    const req = request(url, { method: 'POST', headers: { ...headers, ...length } }, (res) => {
      answered = true;
      const at = sent;
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (d: string) => {
        body += d;
      });
      res.on('end', () => {
        req.destroy();
        resolve({ status: res.statusCode ?? 0, body, sent: at });
      });
    });
    // The server may close the connection once it answered, while this side still writes.
    req.on('error', (error) => (answered ? undefined : reject(error)));
    const pump = () => {
      while (!answered && sent < total) {
        sent += chunk.length;
        if (!req.write(chunk)) return void req.once('drain', pump);
      }
      if (!answered) req.end();
    };
    pump();
  });
}

/**
 * For adapters that read request bodies themselves: a chunked 20 MiB body is cut at maxBodyBytes
 * and a declared one refused before it is read, both 413, on a real server on SQLite.
 */
export function describeBodyLimits(
  framework: string,
  listen: (once: Oncely) => Promise<{ base: string; close(): Promise<void> }>,
): void {
  describe(`${framework} request bodies on a real server`, () => {
    let once: Oncely;
    let server: { base: string; close(): Promise<void> };
    beforeAll(async () => {
      once = await createOncely({ store: sqliteStore({ path: ':memory:' }) });
      server = await listen(once);
    });
    afterAll(async () => {
      await server.close();
      await once.close();
    });
    const headers = (key: string) => ({ 'content-type': 'application/json', 'idempotency-key': key });
    const total = 20 * 1024 * 1024;

    it('defect 11.3: a chunked 20 MiB body gets 413 REQUEST_TOO_LARGE once past maxBodyBytes, not read whole', async () => {
      const answer = await postChunked(`${server.base}/orders`, total, { headers: headers(fresh('chunked')) });
      // Answered while most of the body was still unsent: the server stopped reading near the limit.
      expect(answer.sent).toBeLessThan(total / 2);
      expect([answer.status, JSON.parse(answer.body).code]).toEqual([413, 'REQUEST_TOO_LARGE']);
    });

    it('defect 11.3: a declared Content-Length over maxBodyBytes gets 413 before a byte of the body is read', async () => {
      const answer = await postChunked(`${server.base}/orders`, total, {
        headers: headers(fresh('declared')),
        declare: true,
      });
      expect(answer.sent).toBeLessThan(total / 2);
      expect([answer.status, JSON.parse(answer.body).code]).toEqual([413, 'REQUEST_TOO_LARGE']);
    });
  });
}
