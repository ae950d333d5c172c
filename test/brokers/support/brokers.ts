/**
 * What the RabbitMQ and Redis Streams tests share: a database per test (a SQLite file or a
 * PostgreSQL schema) with the event queue and outbox tables, an admin connection to each broker,
 * and a wait for a condition.
 */
import { execFile } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import amqp from 'amqplib';
import { Redis } from 'ioredis';
import type { OncelyLogger } from '../../../src/core/observer.js';
import { openDb } from '../../../src/db/index.js';
import { migrate } from '../../../src/db/migrate.js';
import type { Db } from '../../../src/db/types.js';
import { EventQueue } from '../../../src/host/events.js';
import { outboxMigrations } from '../../../src/host/outbox-sql.js';
import { dropSchema, freshSchema, POSTGRES_URL } from '../../support/postgres.js';
import { REDIS_URL } from '../../support/redis.js';
import { selectStores } from '../../support/store-filter.js';

export const RABBITMQ_URL = process.env.RABBITMQ_URL ?? 'amqp://guest:guest@127.0.0.1:5672';
export { REDIS_URL };

/** One database of a test: what `openDb` takes, and how to drop it. */
export interface TestDb {
  url: string;
  dispose(): Promise<void>;
}

/** The databases the broker suites run on, those ONCELY_STORES selects. */
export const DIALECTS: Record<string, () => Promise<TestDb>> = Object.fromEntries(
  selectStores([
    {
      name: 'sqlite' as const,
      make: async (): Promise<TestDb> => ({
        url: join(mkdtempSync(join(tmpdir(), 'oncely-brokers-')), 'app.db'),
        dispose: async () => {},
      }),
    },
    {
      name: 'postgres' as const,
      make: async (): Promise<TestDb> => {
        const schema = freshSchema();
        return { url: `${POSTGRES_URL}?schema=${schema}`, dispose: () => dropSchema(schema) };
      },
    },
  ]).map(({ name, make }) => [name, make]),
);

/** The event queue and outbox tables on a database; consumers none (events are stored as no_consumer). */
export async function openQueue(url: string): Promise<{ db: Db; events: EventQueue }> {
  const db = await openDb(url);
  const events = new EventQueue(db, { consumerFor: () => undefined, onConflict: () => {} });
  await events.migrate();
  await migrate(db, outboxMigrations);
  return { db, events };
}

/** A name no other test run uses. */
export const unique = (what: string) => `oncely-test-${what}-${randomUUID().slice(0, 8)}`;

/** A logger that keeps its lines. */
export function keptLogger() {
  const lines: { level: 'info' | 'warn' | 'error'; message: string; fields: Record<string, unknown> }[] = [];
  const logger: OncelyLogger = {
    info: (fields, message) => void lines.push({ level: 'info', message, fields }),
    warn: (fields, message) => void lines.push({ level: 'warn', message, fields }),
    error: (fields, message) => void lines.push({ level: 'error', message, fields }),
  };
  return { logger, lines };
}

/** An admin connection to RabbitMQ for setting up queues and publishing test messages. */
export async function rabbitAdmin() {
  const connection = await amqp.connect(RABBITMQ_URL);
  const channel = await connection.createConfirmChannel();
  const queues: string[] = [];
  return {
    channel,
    /** Declares a durable queue dead-lettering to `<queue>.dead` (declared too); both deleted at close. */
    async queue(name: string) {
      await channel.assertQueue(`${name}.dead`, { durable: true });
      await channel.assertQueue(name, { durable: true, deadLetterExchange: '', deadLetterRoutingKey: `${name}.dead` });
      queues.push(name, `${name}.dead`);
    },
    /** Publishes JSON (or raw bytes) to a queue and waits for the confirm. */
    async publish(queue: string, body: unknown, properties: amqp.Options.Publish = {}) {
      const content = Buffer.isBuffer(body) ? body : Buffer.from(JSON.stringify(body));
      channel.sendToQueue(queue, content, { persistent: true, ...properties });
      await channel.waitForConfirms();
    },
    async count(queue: string) {
      return (await channel.checkQueue(queue)).messageCount;
    },
    async get(queue: string) {
      return channel.get(queue, { noAck: true });
    },
    async close() {
      for (const q of queues) await channel.deleteQueue(q).catch(() => {});
      await connection.close();
    },
  };
}

/** Closes, from the server side, every RabbitMQ connection whose client named itself `connectionName`. */
export async function closeRabbitConnections(connectionName: string): Promise<number> {
  const run = promisify(execFile);
  // Lines of `<pid>\t[{"connection_name","<name>"},...]`; close_connection takes the pid in this form.
  const { stdout } = await run('rabbitmqctl', ['list_connections', 'pid', 'client_properties', '-q']);
  const ours = stdout
    .split('\n')
    .filter((line) => line.includes(`{"connection_name",${JSON.stringify(connectionName)}}`))
    .map((line) => line.split('\t')[0] as string);
  for (const pid of ours) await run('rabbitmqctl', ['close_connection', pid, 'closed by the oncely test']);
  return ours.length;
}

/** A Redis client for setting up streams and reading them back; deletes the keys it was given at close. */
export function redisAdmin() {
  const redis = new Redis(REDIS_URL, { maxRetriesPerRequest: 1 });
  const keys: string[] = [];
  return {
    redis,
    own(...names: string[]) {
      keys.push(...names);
    },
    async close() {
      if (keys.length > 0) await redis.del(...keys);
      redis.disconnect();
    },
  };
}
