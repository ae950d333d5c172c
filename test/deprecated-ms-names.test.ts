/**
 * The `...Ms` option names of 0.1, deprecated for Duration names (issue 32 item 4): each still
 * works, read as the same setting as its new name (both given with different values is refused),
 * with one DeprecationWarning per old name per process. Delete this file with the names in 0.2.0.
 */
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { afterAll, beforeAll, describe, expect, it, type MockInstance, vi } from 'vitest';
import { natsSource, natsTarget, rabbitmqSource, redisStreamsSource } from '../src/brokers/index.js';
import { retrySettings } from '../src/client/retry.js';
import type { OncelyError } from '../src/core/errors.js';
import type { Db } from '../src/db/types.js';
import { checkConfig, eventSettings, type HostConfig } from '../src/host/config.js';
import { OutboxRelay, type RelayOptions } from '../src/host/outbox.js';
import { redisStore } from '../src/redis/index.js';
import type { SqliteDatabase } from '../src/sqlite/driver.js';
import { sqliteStore } from '../src/sqlite/index.js';
import { crashWindows, faultProxy } from '../src/testing/index.js';

const OLD_NAMES = [
  'leaseMs',
  'pollMs',
  'baseDelayMs',
  'maxDelayMs',
  'ackWaitMs',
  'retryDelayMs',
  'timeoutMs',
  'blockMs',
  'claimIdleMs',
  'deadlineMs',
  'attemptTimeoutMs',
  'busyTimeoutMs',
  'retryForMs',
  'delayMs',
];

let warnings: MockInstance<typeof process.emitWarning>;
beforeAll(() => {
  warnings = vi.spyOn(process, 'emitWarning');
});
afterAll(() => {
  warnings.mockRestore();
});

/** What `act` throws (or rejects with): its code and message; 'no error' when it does not. */
async function refusal(act: () => unknown): Promise<{ code: string; message: string } | 'no error'> {
  try {
    await act();
  } catch (error) {
    return { code: (error as OncelyError).code, message: (error as Error).message };
  }
  return 'no error';
}

/**
 * That `make` takes `old` alone and beside `name` at the same value (`same`), and refuses the two
 * at different values: the old name is read, as the setting the new one is.
 */
async function pairs(
  make: (options: Record<string, unknown>) => unknown,
  old: string,
  name: string,
  [ms, same, other]: [number, unknown, unknown],
  code = 'CONFIG_INVALID',
): Promise<void> {
  expect(await refusal(() => make({ [old]: ms })), `${old} alone`).toBe('no error');
  expect(await refusal(() => make({ [old]: ms, [name]: same })), `${old} and ${name} agreeing`).toBe('no error');
  const both = await refusal(() => make({ [old]: ms, [name]: other }));
  expect(both).toMatchObject({ code });
  expect((both as { message: string }).message).toMatch(`${name} and its old name ${old} are both given`);
}

describe('the deprecated ...Ms names still work', () => {
  it('host config events: baseDelayMs and leaseMs, accepted by the key check and read as backoff and lease', async () => {
    const old: HostConfig = { events: { maxAttempts: 2, baseDelayMs: 10, leaseMs: 1_000 } };
    expect(() => checkConfig(old, 'c.ts')).not.toThrow();
    expect(eventSettings(old)).toEqual({ maxAttempts: 2, baseDelayMs: 10, leaseMs: 1_000 });
    expect(eventSettings(old)).toEqual(eventSettings({ events: { maxAttempts: 2, backoff: '10ms', lease: '1s' } }));
    await pairs((events) => eventSettings({ events }), 'baseDelayMs', 'backoff', [10, '10ms', '1s']);
    await pairs((events) => eventSettings({ events }), 'leaseMs', 'lease', [1_000, '1s', '2s']);
  });

  it('OutboxRelay and brokerRelay: pollMs, leaseMs, baseDelayMs, maxDelayMs', async () => {
    const db = undefined as unknown as Db;
    const target = { deliver: async () => undefined };
    const relay = (options: Record<string, unknown>) => new OutboxRelay(db, { target, ...options } as RelayOptions);
    await pairs(relay, 'pollMs', 'poll', [100, '100ms', '1s'], 'INVALID_ARGUMENT');
    await pairs(relay, 'leaseMs', 'lease', [5_000, '5s', '6s'], 'INVALID_ARGUMENT');
    await pairs(relay, 'baseDelayMs', 'backoff', [50, '50ms', '1s'], 'INVALID_ARGUMENT');
    await pairs(relay, 'maxDelayMs', 'maxBackoff', [60_000, '1m', '2m'], 'INVALID_ARGUMENT');
  });

  it('broker sources: baseDelayMs and maxDelayMs of reconnects, ackWaitMs, retryDelayMs, blockMs, claimIdleMs', async () => {
    const nats = (options: Record<string, unknown>) => natsSource({ name: 'n', stream: 'S', durable: 'd', ...options });
    const rabbit = (options: Record<string, unknown>) =>
      rabbitmqSource({ name: 'r', url: 'amqp://127.0.0.1', queue: 'q', ...options });
    const streams = (options: Record<string, unknown>) =>
      redisStreamsSource({ name: 's', url: 'redis://127.0.0.1', stream: 's', group: 'g', ...options });
    for (const source of [nats, rabbit, streams]) {
      await pairs(source, 'baseDelayMs', 'backoff', [200, '200ms', '1s']);
      await pairs(source, 'maxDelayMs', 'maxBackoff', [10_000, '10s', '20s']);
    }
    await pairs(nats, 'ackWaitMs', 'ackWait', [2_000, '2s', '3s']);
    // The old value is the one checked: JetStream's ack_wait is at least a second.
    expect(await refusal(() => nats({ ackWaitMs: 500 }))).toEqual({
      code: 'CONFIG_INVALID',
      message: 'nats source n: ackWait must be at least 1s',
    });
    await pairs(nats, 'retryDelayMs', 'retryDelay', [50, '50ms', '1s']);
    await pairs(rabbit, 'retryDelayMs', 'retryDelay', [50, '50ms', '1s']);
    await pairs(streams, 'blockMs', 'block', [100, '100ms', '1s']);
    await pairs(streams, 'claimIdleMs', 'claimIdle', [250, '250ms', '1s']);
  });

  it('natsTarget: timeoutMs', async () => {
    await pairs((options) => natsTarget(options), 'timeoutMs', 'timeout', [500, '500ms', '5s']);
  });

  it('redisStore: timeoutMs; sqliteStore: busyTimeoutMs, given to SQLite as its busy_timeout', async () => {
    const redis = async (options: Record<string, unknown>) =>
      redisStore({ url: 'redis://127.0.0.1:6379', ...options }).close();
    await pairs(redis, 'timeoutMs', 'timeout', [300, '300ms', '1s'], 'INVALID_ARGUMENT');
    expect(await refusal(() => redis({ timeoutMs: 0 }))).toMatchObject({
      message: 'redisStore: timeout must be longer than 0',
    });

    const path = join(mkdtempSync(join(tmpdir(), 'oncely-ms-names-')), 'a.db');
    const database = new Database(path);
    try {
      const sqlite = (options: Record<string, unknown>) =>
        sqliteStore({ database: database as unknown as SqliteDatabase, ...options }).close();
      await pairs(sqlite, 'busyTimeoutMs', 'busyTimeout', [20, '20ms', '1s'], 'INVALID_ARGUMENT');
      await sqlite({ busyTimeoutMs: 20 });
      expect(database.pragma('busy_timeout', { simple: true })).toBe(20);
    } finally {
      database.close();
    }
  });

  it('idempotentFetch and createClient: deadlineMs, attemptTimeoutMs, baseDelayMs, maxDelayMs', async () => {
    expect(retrySettings({ deadlineMs: 300, attemptTimeoutMs: 200, baseDelayMs: 20, maxDelayMs: 100 })).toEqual(
      retrySettings({ deadline: '300ms', attemptTimeout: 200, backoff: '20ms', maxBackoff: 100 }),
    );
    await pairs(retrySettings, 'deadlineMs', 'deadline', [300, '300ms', '1s'], 'INVALID_ARGUMENT');
    await pairs(retrySettings, 'attemptTimeoutMs', 'attemptTimeout', [200, '200ms', '1s'], 'INVALID_ARGUMENT');
    await pairs(retrySettings, 'baseDelayMs', 'backoff', [20, '20ms', '1s'], 'INVALID_ARGUMENT');
    await pairs(retrySettings, 'maxDelayMs', 'maxBackoff', [100, '100ms', '1s'], 'INVALID_ARGUMENT');
  });

  it("the test kit: crashWindows' retryForMs and a delay fault's delayMs", async () => {
    // Refused before any child starts: the two names are one setting.
    expect(
      await refusal(() =>
        crashWindows({ child: { module: '/nowhere.js' }, effects: () => 0, retryFor: '15s', retryForMs: 10_000 }),
      ),
    ).toEqual({
      code: 'INVALID_ARGUMENT',
      message: 'crashWindows: retryFor and its old name retryForMs are both given, with different values',
    });
    const proxy = async (rule: Record<string, unknown>) =>
      (await faultProxy({ target: 'http://127.0.0.1:1', plan: [{ nth: 1, fault: 'delay', ...rule }] })).close();
    await pairs(proxy, 'delayMs', 'delay', [300, '300ms', '1s'], 'INVALID_ARGUMENT');
  });

  it('warned once for each old name in this process, with its code', () => {
    const codes = warnings.mock.calls.map(([, options]) => (options as { code?: string } | undefined)?.code);
    for (const old of OLD_NAMES) {
      const code = `ONCELY_DEP_${old.replace(/[A-Z]/g, (c) => `_${c}`).toUpperCase()}`;
      expect(
        codes.filter((c) => c === code),
        code,
      ).toHaveLength(1);
    }
    for (const [, options] of warnings.mock.calls) expect(options).toMatchObject({ type: 'DeprecationWarning' });
  });
});
