import { IdempotencyConfig, makeIdempotent } from '@aws-lambda-powertools/idempotency';
import { CachePersistenceLayer } from '@aws-lambda-powertools/idempotency/cache';
import { createClient } from 'redis';
import type { Subject } from './engine.js';
import { inputOf } from './engine.js';
import { dropPrefix, NODE_REDIS_OPTIONS } from './setup.js';

/** The little of a Lambda context Powertools reads: the time left bounds an in-progress claim, like a lease. */
const fakeContext = {
  functionName: 'bench',
  functionVersion: '$LATEST',
  invokedFunctionArn: 'arn:aws:lambda:eu-west-1:000000000000:function:bench',
  memoryLimitInMB: '128',
  awsRequestId: 'bench',
  logGroupName: '/aws/lambda/bench',
  logStreamName: 'bench',
  callbackWaitsForEmptyEventLoop: false,
  getRemainingTimeInMillis: () => 30_000,
  done: () => {},
  fail: () => {},
  succeed: () => {},
};

/**
 * `@aws-lambda-powertools/idempotency` on the real Redis, through its `CachePersistenceLayer` on a
 * node-redis client, with its defaults: the whole input is the key (hashed), no local cache.
 * Per first execution it sends SET NX (claim) then SET (result), as the Redis floor does.
 */
export async function powertoolsSubject(prefix: string): Promise<Subject> {
  const client = createClient(NODE_REDIS_OPTIONS);
  client.on('error', () => {});
  await client.connect();
  // Executions per key index, counted in one typed array rather than a Map: a Map of hundreds of
  // thousands of keys would give the garbage collector, and so every subject measured in this
  // process, work that has nothing to do with Powertools. Clamped: counts stop at 255.
  let executions = new Uint8ClampedArray(1 << 20);
  const handler = async (event: ReturnType<typeof inputOf>, _context: typeof fakeContext) => {
    if (event.id >= executions.length) {
      const grown = new Uint8ClampedArray(Math.max(executions.length * 2, event.id + 1));
      grown.set(executions);
      executions = grown;
    }
    executions[event.id] = (executions[event.id] ?? 0) + 1;
    return { ok: true, id: event.id };
  };
  const idempotent = makeIdempotent(handler, {
    persistenceStore: new CachePersistenceLayer({ client }),
    config: new IdempotencyConfig({}),
    keyPrefix: prefix,
  });
  // Every key, first run or replay, must have executed exactly once.
  const call = async (i: number) => {
    const result = await idempotent(inputOf(i), fakeContext);
    if (result.id !== i || executions[i] !== 1) throw new Error(`powertools ran key ${i} other than once`);
  };
  return {
    first: call,
    replay: call,
    async close() {
      await dropPrefix(client, prefix);
      await client.close();
    },
  };
}
