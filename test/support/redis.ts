import { randomUUID } from 'node:crypto';
import { createClient } from 'redis';

/** The Redis the tests use; REDIS_URL overrides the local default. */
export const REDIS_URL = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379';

/** A key prefix no other test run uses, so runs in parallel never see each other's records. */
export function freshPrefix(): string {
  return `oncely-test:${randomUUID().slice(0, 8)}:`;
}

/** A connected node-redis client that fails at once, instead of retrying, when Redis is down. */
export async function connectRedis(options: { RESP?: 2 | 3 } = {}) {
  const client = createClient({ url: REDIS_URL, socket: { reconnectStrategy: false }, ...options });
  client.on('error', () => {});
  await client.connect();
  return client;
}

/** A node-redis client, or any function that sends one raw command (name first) through another driver. */
type Sender = { sendCommand(args: string[]): Promise<unknown> } | ((args: string[]) => Promise<unknown>);

/** Deletes every key under `prefix` (SCAN, then DEL), leaving the rest of the database alone. */
export async function dropPrefix(client: Sender, prefix: string): Promise<number> {
  const send = typeof client === 'function' ? client : (args: string[]) => client.sendCommand(args);
  // SCAN MATCH takes a glob: escape its special characters so the prefix matches literally.
  const pattern = `${prefix.replace(/[*?[\]\\]/g, '\\$&')}*`;
  let cursor = '0';
  let dropped = 0;
  do {
    const [next, keys] = (await send(['SCAN', cursor, 'MATCH', pattern, 'COUNT', '1000'])) as [string, string[]];
    cursor = String(next);
    if (keys.length > 0) dropped += Number(await send(['DEL', ...keys.map(String)]));
  } while (cursor !== '0');
  return dropped;
}

/**
 * Another application's keys beside the tests' own, as a Redis in production holds them: `count`
 * strings under `prefix`, written by MSETs of 1,000 keys side by side (a few seconds for 200,000).
 * Each MSET's keys share a hash tag (one of 16), so on a cluster each goes to one slot and the
 * keys spread over every master. `drop` UNLINKs them by name, a thousand at a time, the same way.
 */
export async function seedOtherKeys(client: Sender, prefix: string, count: number): Promise<{ drop(): Promise<void> }> {
  const send = typeof client === 'function' ? client : (args: string[]) => client.sendCommand(args);
  const batches = Array.from({ length: Math.ceil(count / 1_000) }, (_, b) =>
    Array.from({ length: Math.min(1_000, count - b * 1_000) }, (_, i) => `${prefix}{t${b % 16}}:${b * 1_000 + i}`),
  );
  const inWaves = async (each: (keys: string[]) => Promise<unknown>) => {
    for (let w = 0; w < batches.length; w += 20) await Promise.all(batches.slice(w, w + 20).map(each));
  };
  await inWaves((keys) => send(['MSET', ...keys.flatMap((key) => [key, `session of ${key.length}`])]));
  return { drop: () => inWaves((keys) => send(['UNLINK', ...keys])) };
}
