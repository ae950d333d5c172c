/**
 * `oncely serve` (the built CLI) on a small app: what it prints, `GET /`, failures logged one line
 * each, internal error messages kept from clients, `last_error` cleared once an event applies, and
 * `created_at` columns that cannot hold epoch milliseconds refused at migrate on PostgreSQL.
 */
import { type ChildProcess, execFile, spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import Database from 'better-sqlite3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { dropSchema, freshSchema, POSTGRES_URL } from './support/postgres.js';
import { until } from './support/wait.js';

const run = promisify(execFile);
const CLI = 'dist/cli/main.js';

function app(files: Record<string, string>): string {
  const dir = mkdtempSync(join(tmpdir(), 'oncely-serve-'));
  for (const [name, text] of Object.entries({ 'package.json': '{ "type": "module" }\n', ...files })) {
    mkdirSync(join(dir, name, '..'), { recursive: true });
    writeFileSync(join(dir, name), text);
  }
  return dir;
}

describe('oncely serve on an app whose handlers and consumers fail', () => {
  const dir = app({
    'oncely.config.ts': `export default {
  sources: { hooks: { kind: 'id-field', idField: 'id', typeField: 'type', unsigned: true } },
  events: { maxAttempts: 3, backoff: 10 },
};\n`,
    'consumers/hooks/flaky.ts': `export function handle(event: { attempt: number }) {
  if (event.attempt === 1) throw Object.assign(new Error('the first attempt fails'), { code: 'FLAKY' });
}\n`,
    'handlers/things/boom.ts': `export function handle() { throw new Error('relation "secret_internals" does not exist'); }\n`,
    'handlers/things/taken.ts': `export const idempotency = { keyFields: ['id'] };
export function handle() { throw Object.assign(new Error('thing T-1 is taken'), { status: 409, code: 'THING_TAKEN' }); }\n`,
  });
  const db = join(dir, 'app.db');
  let server: ChildProcess;
  let stdout = '';
  let stderr = '';
  let base = '';
  beforeAll(async () => {
    server = spawn(process.execPath, [CLI, 'serve', '--dir', dir, '--db', db, '--port', '0']);
    server.stdout?.on('data', (c) => {
      stdout += c;
    });
    server.stderr?.on('data', (c) => {
      stderr += c;
    });
    await until(
      'the serve banner to end with its Ctrl-C line',
      () => (server.exitCode === null ? stdout : `exited ${server.exitCode}: ${stderr}`),
      (out) => /stop with Ctrl-C/.test(out),
    );
    base = stdout.match(/on (http:\/\/localhost:\d+)/)?.[1] ?? '';
  });
  afterAll(() => server.kill('SIGTERM'));
  const post = async (path: string, body: unknown, headers: Record<string, string> = {}) => {
    const res = await fetch(`${base}${path}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...headers },
      body: JSON.stringify(body),
    });
    return { status: res.status, body: (await res.json()) as { error?: { code: string; message: string } } };
  };

  it('prints each handler with a curl line, each webhook URL with its signing, stats and dead letters', () => {
    expect(stdout).toContain(`oncely serving ${dir} on ${base}`);
    expect(stdout).toMatch(
      new RegExp(
        `curl -s -X POST ${base}/v1/invoke/things\\.taken .*-H 'Idempotency-Key: [^']+' -d '\\{"id":"<id>"\\}'`,
      ),
    );
    expect(stdout).toContain(`hooks (id-field)  POST ${base}/v1/webhooks/hooks`);
    expect(stdout).toContain('unsigned: anyone who reaches the URL can post events');
    expect(stdout).toContain(`event stats:  GET ${base}/v1/events/stats`);
    expect(stdout).toContain(`dead letters: npx oncely events dead list ${dir}`);
  });

  it('answers GET / with the same index', async () => {
    const index = (await (await fetch(`${base}/`)).json()) as {
      data: { handlers: { id: string }[]; webhooks: { source: string }[]; health: string };
    };
    expect(index.data.handlers.map((h) => h.id)).toEqual(['things.boom', 'things.taken']);
    expect(index.data.webhooks.map((w) => w.source)).toEqual(['hooks']);
    expect(index.data.health).toBe(`${base}/v1/health`);
  });

  it("keeps an internal error's message from the client and logs it; a public code and message go out", async () => {
    const boom = await post('/v1/invoke/things.boom', {}, { 'idempotency-key': 'b-1' });
    expect(boom).toEqual({
      status: 500,
      body: {
        code: 500,
        error: { code: 'HANDLER_FAILED', message: expect.stringMatching(/server log/) },
        requestId: expect.any(String),
      },
    });
    expect(JSON.stringify(boom.body)).not.toContain('secret_internals');
    const taken = await post('/v1/invoke/things.taken', { id: 'T-1' });
    expect(taken.status).toBe(409);
    expect(taken.body.error).toEqual({ code: 'THING_TAKEN', message: 'thing T-1 is taken' });
    // The lines reach this process through the child's stderr pipe, after the answers.
    const boomLine =
      'oncely: handler failed: things.boom, key b-1: Error: relation "secret_internals" does not exist\n';
    const takenLine = 'oncely: handler failed: things.taken, key T-1: Error THING_TAKEN: thing T-1 is taken\n';
    await until(
      'both handler failures logged',
      () => stderr,
      (err) => err.includes(boomLine) && err.includes(takenLine),
    );
  });

  it('logs a failed consumer attempt in one line, and clears last_error once the event applies', async () => {
    expect((await post('/v1/webhooks/hooks', { id: 'evt_1', type: 'flaky' })).status).toBe(200);
    const read = () => {
      const sqlite = new Database(db, { readonly: true });
      try {
        return sqlite.prepare('SELECT status, attempts, last_error FROM oncely_events WHERE event_id = ?').get('evt_1');
      } finally {
        sqlite.close();
      }
    };
    expect(
      await until('evt_1 to apply', read, (row) => (row as { status: string } | undefined)?.status === 'applied'),
    ).toEqual({ status: 'applied', attempts: 2, last_error: null });
    // The line reaches this process through the child's stderr pipe, which can be read after the row is applied.
    const logged =
      /oncely: consumer failed: hooks\/flaky event evt_1, attempt 1 of 3, retry in \d+ ms: Error FLAKY: the first attempt fails\n/;
    await until(
      'the failed attempt of evt_1 logged',
      () => stderr,
      (err) => logged.test(err),
    );
  });
});

describe('oncely migrate on PostgreSQL', () => {
  const schema = freshSchema();
  afterAll(() => dropSchema(schema));

  it('refuses a created_at column that cannot hold epoch milliseconds, naming it, and applies nothing', async () => {
    const dir = app({
      'schema.sql':
        'CREATE TABLE IF NOT EXISTS notes (id TEXT PRIMARY KEY, body TEXT, created_at INTEGER, updated_at BIGINT);\n',
    });
    const target = `${POSTGRES_URL}?schema=${schema}`;
    const failed = await run(process.execPath, [CLI, 'migrate', dir, '--db', target]).then(
      () => undefined,
      (e: { code: number; stderr: string }) => e,
    );
    expect(failed?.code).toBe(1);
    expect(failed?.stderr.trim()).toBe(
      'oncely: notes.created_at is INTEGER, which cannot hold epoch milliseconds: declare it BIGINT or TIMESTAMPTZ in schema.sql (an existing table: ALTER TABLE notes ALTER COLUMN created_at TYPE BIGINT)',
    );
    // Fixing the file is enough: the refused schema was rolled back with its migration.
    writeFileSync(
      join(dir, 'schema.sql'),
      'CREATE TABLE IF NOT EXISTS notes (id TEXT PRIMARY KEY, body TEXT, created_at BIGINT, updated_at TIMESTAMPTZ);\n',
    );
    expect((await run(process.execPath, [CLI, 'migrate', dir, '--db', target])).stdout.trim()).toBe(`migrated ${dir}`);
  });
});
