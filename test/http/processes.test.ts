import { type ChildProcessWithoutNullStreams, spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { dropSchema, freshSchema, POSTGRES_URL } from '../support/postgres.js';

const SERVER = fileURLToPath(new URL('../support/http-server.ts', import.meta.url));

function startServer(
  framework: string,
  schema: string,
): Promise<{ child: ChildProcessWithoutNullStreams; port: number }> {
  const child = spawn(process.execPath, ['--import', 'tsx', SERVER, framework, POSTGRES_URL, schema]);
  let stderr = '';
  child.stderr.on('data', (chunk) => {
    stderr += chunk;
  });
  return new Promise((resolve, reject) => {
    createInterface({ input: child.stdout }).on('line', (line) => {
      const match = /^port (\d+)$/.exec(line);
      if (match) resolve({ child, port: Number(match[1]) });
    });
    child.on('exit', (code) => reject(new Error(`${framework} server exited ${code}: ${stderr}`)));
  });
}

describe('HTTP across processes', () => {
  const schema = freshSchema();
  const servers: ChildProcessWithoutNullStreams[] = [];
  afterAll(async () => {
    for (const child of servers) child.kill('SIGKILL');
    await dropSchema(schema);
  });

  it('3 servers (express, fastify, hono) on one PostgreSQL, 200 clients, 50 keys: each handler ran once, every client got the same answer', async () => {
    const started = await Promise.all(['express', 'fastify', 'hono'].map((f) => startServer(f, schema)));
    servers.push(...started.map((s) => s.child));
    const ports = started.map((s) => s.port);
    const responses = await Promise.all(
      Array.from({ length: 200 }, async (_, client) => {
        const key = `order-${client % 50}`;
        const port = ports[client % ports.length];
        const res = await fetch(`http://127.0.0.1:${port}/orders`, {
          method: 'POST',
          headers: { 'content-type': 'application/json', 'idempotency-key': `"${key}"`, 'x-account': 'acme' },
          body: JSON.stringify({ item: `item-${key}`, amount: client % 50 }),
        });
        return { key, status: res.status, body: await res.text() };
      }),
    );
    const byKey = new Map<string, Set<string>>();
    for (const r of responses) {
      expect(r.status, r.body).toBe(201);
      byKey.set(r.key, (byKey.get(r.key) ?? new Set()).add(r.body));
    }
    expect(byKey.size).toBe(50);
    for (const [key, bodies] of byKey) expect([...bodies].join(' | '), key).not.toContain(' | ');
    const executions = new Map<string, number>();
    for (const port of ports) {
      const calls = (await (await fetch(`http://127.0.0.1:${port}/__calls`)).json()) as Record<string, number>;
      for (const [name, n] of Object.entries(calls)) executions.set(name, (executions.get(name) ?? 0) + n);
    }
    expect(executions.size).toBe(50);
    expect([...executions.values()].every((n) => n === 1)).toBe(true);
  });
});
