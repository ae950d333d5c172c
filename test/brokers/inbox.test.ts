import { execFile } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { afterAll, describe, expect, it } from 'vitest';
import { onceInbox } from '../../src/brokers/inbox.js';
import { natsSource } from '../../src/brokers/nats.js';
import type { OncelyLogger } from '../../src/core/observer.js';
import { createOncely } from '../../src/engine/engine.js';
import { dropSchema, freshSchema, POSTGRES_URL } from '../support/postgres.js';
import { openStore, type StoreSpec } from '../support/stores.js';
import { until } from '../support/wait.js';
import { closeAdmin, freshStream } from './support/nats.js';

const schema = freshSchema();
const specs: StoreSpec[] = [
  { kind: 'sqlite', path: join(mkdtempSync(join(tmpdir(), 'oncely-inbox-')), 'records.db') },
  { kind: 'postgres', connectionString: POSTGRES_URL, schema },
];

afterAll(async () => {
  await closeAdmin();
  await dropSchema(schema);
});

describe('oncely/brokers', () => {
  it('loads no broker client until a source or target connects', async () => {
    const entry = fileURLToPath(new URL('../../src/brokers/index.ts', import.meta.url));
    // A resolve hook that answers the broker clients (NATS, amqplib, the Redis clients) as Node answers
    // a package not installed: importing the entry must not ask for them.
    const hook = `export async function resolve(specifier, context, next) {
      if (/^(@nats-io\\/|amqplib$|ioredis$|redis$)/.test(specifier))
        throw Object.assign(new Error("Cannot find package '" + specifier + "' imported from here"), { code: 'ERR_MODULE_NOT_FOUND' });
      return next(specifier, context);
    }`;
    const register = `import { register } from 'node:module'; register('data:text/javascript,' + encodeURIComponent(${JSON.stringify(hook)}));`;
    const script = `const brokers = await import(${JSON.stringify(entry)}); console.log(Object.keys(brokers).length > 0 ? 'loaded' : 'empty');`;
    const run = (code: string) =>
      promisify(execFile)(process.execPath, [
        '--import',
        'tsx',
        '--import',
        `data:text/javascript,${encodeURIComponent(register)}`,
        '--input-type=module',
        '-e',
        code,
      ]);
    expect((await run(script)).stdout.trim()).toBe('loaded');
    // The hook does refuse them: a source that connects asks for the client, and says how to install it.
    const wait = fileURLToPath(new URL('../support/wait.ts', import.meta.url));
    const connect = `const { natsSource } = await import(${JSON.stringify(entry)});
      const { until } = await import(${JSON.stringify(wait)});
      const source = natsSource({ name: 'n', stream: 'S', durable: 'd', backoff: '10s' });
      await source.start(async () => {});
      console.log(await until("the source's first connect error", () => source.status().lastError));
      await source.stop();`;
    expect((await run(connect)).stdout).toContain(
      "PACKAGE_MISSING: a NATS source or target needs '@nats-io/transport-node'",
    );
  });
});

for (const spec of specs) {
  describe(`the library inbox (once.run per message) on a ${spec.kind} store`, () => {
    it('runs each message id once however often it comes, gives a failed run back for redelivery, rejects a message without an id', async () => {
      const stream = await freshStream(100);
      const once = await createOncely({ store: openStore(spec), metrics: false });
      const warnings: string[] = [];
      const errors: string[] = [];
      const logger: OncelyLogger = {
        info: () => {},
        warn: (_f, m) => void warnings.push(m),
        error: (_f, m) => void errors.push(m),
      };
      const runs: string[] = [];
      let failOnce = true;
      const inbox = onceInbox(natsSource({ name: 'payments', stream: stream.stream, durable: 'lib', retryDelay: 50 }), {
        once,
        action: 'capture',
        logger,
        handle: async (message) => {
          if (message.id === 'p2' && failOnce) {
            failOnce = false;
            throw new Error('gateway timeout');
          }
          runs.push(message.id as string);
          return { captured: message.id };
        },
      });
      try {
        await stream.publish('captured', { amount: 1 }, 'p1');
        await stream.publish('captured', { amount: 2 }, 'p2');
        await stream.publish('captured', { amount: 3 });
        await inbox.start();
        await until('first three settled', async () => {
          const c = await stream.consumer('lib');
          return c.pending === 0 && c.ackPending === 0;
        });
        // sleep: past the stream's 100 ms duplicate window, so JetStream stores the repeats.
        await new Promise((resolve) => setTimeout(resolve, 200));
        // Past JetStream's window: both stored again, both replayed by the engine, not run.
        await stream.publish('captured', { amount: 1 }, 'p1');
        await stream.publish('captured', { amount: 2 }, 'p2');
        await until('repeats settled', async () => {
          const c = await stream.consumer('lib');
          return c.pending === 0 && c.ackPending === 0;
        });
        expect(runs.sort()).toEqual(['p1', 'p2']);
        expect(warnings).toEqual(['broker message rejected']);
        expect(errors).toEqual(['broker message failed']);
        expect(failOnce).toBe(false);
        expect(await stream.messages()).toBe(5);
      } finally {
        await inbox.stop();
        await once.close();
        await stream.dispose();
      }
    });
  });
}
