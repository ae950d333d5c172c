/**
 * Black box: `oncely serve` (the built CLI) with a RabbitMQ source, given a batch of good messages
 * and bad ones (a NUL in the type, a NUL in the id, a body over the cap, one the database refuses).
 * Counted from outside: the effects in the app's own table, the dead-letter queue, the lines on stderr.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { afterAll, describe, expect, it } from 'vitest';
import { until } from '../support/wait.js';
import { openQueue, RABBITMQ_URL, rabbitAdmin, unique } from './support/brokers.js';

const CLI = 'dist/cli/main.js';
const GOOD = 10;

describe('oncely serve with a RabbitMQ source', () => {
  let server: ChildProcess | undefined;
  let admin: Awaited<ReturnType<typeof rabbitAdmin>> | undefined;
  afterAll(async () => {
    server?.kill('SIGTERM');
    await admin?.close();
  });

  it('review3.4: applies the good messages of a batch, dead-letters each bad one once with one stderr line, and does not spin', async () => {
    admin = await rabbitAdmin();
    const queue = unique('serve-poison');
    await admin.queue(queue);
    const dir = mkdtempSync(join(tmpdir(), 'oncely-serve-poison-'));
    const files: Record<string, string> = {
      'package.json': '{ "type": "module" }\n',
      'schema.sql': 'CREATE TABLE IF NOT EXISTS effects (event_id TEXT PRIMARY KEY);\n',
      'oncely.config.ts': `export default {
  brokers: { orders: { kind: 'rabbitmq', url: ${JSON.stringify(RABBITMQ_URL)}, queue: ${JSON.stringify(queue)}, maxBodyBytes: 1024 } },
};\n`,
      'consumers/orders/order.paid.ts': `export async function handle(event, ctx) {
  await ctx.store.createIfAbsent('effects', { event_id: event.id }, ['event_id']);
}\n`,
    };
    for (const [name, text] of Object.entries(files)) {
      mkdirSync(join(dir, name, '..'), { recursive: true });
      writeFileSync(join(dir, name), text);
    }
    const db = join(dir, 'app.db');
    // The events table made ahead, with a trigger refusing one id as a data error: a message no check
    // at intake can see coming.
    const made = await openQueue(db);
    await made.db.run(`CREATE TRIGGER refuse_poison BEFORE INSERT ON oncely_events WHEN NEW.event_id = 'poison'
      BEGIN SELECT RAISE(ABORT, 'the test refuses poison'); END`);
    await made.db.close();

    const publish = (id: string, type: string, data: unknown) => admin?.publish(queue, data, { messageId: id, type });
    for (let i = 1; i <= GOOD; i++) {
      await publish(`good-${i}`, 'order.paid', { n: i });
      if (i === 3) await publish('bad-type', 'order.\u0000paid', {});
      if (i === 5) await publish('bad\u0000id', 'order.paid', {});
      if (i === 7) await publish('too-big', 'order.paid', { pad: 'x'.repeat(4096) });
      if (i === 9) await publish('poison', 'order.paid', {});
    }

    let stderr = '';
    let stdout = '';
    server = spawn(process.execPath, [CLI, 'serve', '--dir', dir, '--db', db, '--port', '0']);
    server.stdout?.on('data', (c) => {
      stdout += c;
    });
    server.stderr?.on('data', (c) => {
      stderr += c;
    });
    const lines = (start: string) => stderr.split('\n').filter((l) => l.startsWith(start));
    const effects = () => {
      const sqlite = new Database(db, { readonly: true });
      try {
        return (sqlite.prepare('SELECT event_id FROM effects ORDER BY event_id').all() as { event_id: string }[]).map(
          (r) => r.event_id,
        );
      } catch {
        return []; // not migrated yet
      } finally {
        sqlite.close();
      }
    };
    let seen = '';
    await until(
      'the good messages applied and the bad ones dead-lettered',
      async () => {
        const [applied, dead] = [effects().length, await admin?.count(`${queue}.dead`)];
        seen = `${applied} applied, ${dead} dead-lettered; stdout: ${stdout.slice(0, 200)}; stderr: ${stderr.slice(-500)}`;
        return applied === GOOD && dead === 4;
      },
      undefined,
      { timeoutMs: 30_000 },
    ).catch((error: Error) => {
      throw new Error(`${error.message} (last seen: ${seen})`);
    });
    // sleep: a spinning batch logs again within a second or so: the counts must not move over this window.
    await new Promise((resolve) => setTimeout(resolve, 2_000));
    expect(effects()).toEqual(Array.from({ length: GOOD }, (_, i) => `good-${i + 1}`).sort());
    expect(await admin.count(`${queue}.dead`)).toBe(4);
    expect(lines('broker batch not stored')).toEqual([]);
    const rejected = lines('broker message rejected ').map((l) => JSON.parse(l.slice(24)).reason as string);
    expect(rejected.sort()).toEqual([
      expect.stringMatching(/^the body is \d+ bytes, over the source's maxBodyBytes \(1024\)$/),
      expect.stringMatching(/^the database refused it \(.*the test refuses poison/),
      expect.stringMatching(/^the message id is not a valid key/),
      expect.stringMatching(/^the message type is not a valid event type/),
    ]);
    server.kill('SIGTERM');
    await new Promise((resolve) => server?.once('exit', resolve));
    server = undefined;
    // Stopped: whatever it held went back to the queue; nothing did.
    expect(await admin.count(queue)).toBe(0);
  }, 60_000);
});
