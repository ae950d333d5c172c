import { InvalidArgumentError, OncelyError } from '../core/errors.js';
import type { RecordId, RecordState, StoredRecord } from '../core/record.js';
import type { Expectation, InsertResult, RecordPatch, RecordStore } from '../store.js';
import { GET, INSERT_OR_GET, type RedisScript, UPDATE } from './scripts.js';

/**
 * The one method the store calls on a Redis client: node-redis 4, 5 and 6 clients have it (a
 * cluster client does not). A client passed in must already be connected; it stays the caller's.
 */
export interface RedisClientLike {
  /** Sends one raw command and resolves with its reply. */
  sendCommand(args: string[]): Promise<unknown>;
}

/** Where the store finds Redis: a URL it connects to itself, or a client the caller owns. */
export type RedisStoreOptions = ({ url: string; client?: undefined } | { client: RedisClientLike; url?: undefined }) & {
  /** Prepended to every key the store writes; defaults to 'oncely:'. A client's own keyPrefix does not apply. */
  prefix?: string;
};

// What the store needs from a node-redis client it created. Declared here, not imported, because
// `redis` is an optional peer dependency: these types must not leak into the public declarations.
interface OwnedClient extends RedisClientLike {
  readonly isOpen: boolean;
  connect(): Promise<unknown>;
  close?(): Promise<unknown>;
  quit?(): Promise<unknown>;
  destroy?(): void;
  on(event: 'error', listener: (error: unknown) => void): unknown;
}

const NUMBER_FIELDS = ['fence', 'attempts', 'createdAt', 'updatedAt'] as const;
const NULLABLE_NUMBER_FIELDS = ['leaseUntil', 'completedAt', 'expiresAt'] as const;
const ID_FIELDS = new Set(['tenant', 'action', 'key']);

/**
 * A record store on Redis: each record is one hash, each operation one atomic Lua script (one
 * round trip), and Redis expires records itself. It cannot join a caller's SQL transaction.
 * @example
 * const store = redisStore({ url: 'redis://127.0.0.1:6379', prefix: 'billing:' });
 */
export function redisStore(options: RedisStoreOptions): RecordStore {
  const { prefix = 'oncely:' } = options;
  if (typeof prefix !== 'string') throw new InvalidArgumentError('redisStore: prefix must be a string');
  if ((options.url === undefined) === (options.client === undefined)) {
    throw new InvalidArgumentError('redisStore: give exactly one of `url` or `client`');
  }
  const { url, client: given } = options;
  let owned: OwnedClient | undefined;
  let connecting: Promise<OwnedClient> | undefined;
  let closed = false;

  // Connects on first use, not in the constructor, so a store made while Redis is down works once
  // it is up. A failed attempt is forgotten, and so is a client whose connection later dropped
  // (it does not reconnect, see openClient): the next call simply tries again.
  async function client(): Promise<RedisClientLike> {
    if (closed) throw new OncelyError('CLOSED', 'the redis store is closed');
    if (given) return given;
    if (owned && !owned.isOpen) {
      dispose(owned);
      owned = undefined;
      connecting = undefined;
    }
    connecting ??= openClient(url as string).then(
      (c) => {
        owned = c;
        return c;
      },
      (error: unknown) => {
        connecting = undefined;
        throw error;
      },
    );
    return connecting;
  }

  async function run(script: RedisScript, id: RecordId, args: string[]): Promise<unknown> {
    return evalScript(await client(), script, recordKey(prefix, id), args);
  }

  return {
    kind: 'redis',

    async insertOrGet(record: StoredRecord, tx?: unknown): Promise<InsertResult> {
      refuseTransaction(tx);
      const args: string[] = [];
      for (const [field, value] of Object.entries(record)) {
        if (value !== null && value !== undefined) args.push(field, String(value));
      }
      const reply = (await run(INSERT_OR_GET, record, args)) as [number, unknown[]?];
      if (reply[0] === 1) return { inserted: true, record: { ...record } };
      return { inserted: false, record: decode(reply[1] ?? []) as StoredRecord };
    },

    async update(id: RecordId, expect: Expectation, patch: RecordPatch, tx?: unknown): Promise<boolean> {
      refuseTransaction(tx);
      let leaseCheck = '0';
      let lease = '';
      if ('leaseUntil' in expect) {
        leaseCheck = expect.leaseUntil === null || expect.leaseUntil === undefined ? '1' : '2';
        lease = String(expect.leaseUntil ?? '');
      }
      const set: string[] = [];
      const remove: string[] = [];
      for (const [field, value] of Object.entries(patch)) {
        if (value === undefined || ID_FIELDS.has(field)) continue;
        if (value === null) remove.push(field);
        else set.push(field, String(value));
      }
      const states = `,${expect.states.join(',')},`;
      const args = [String(expect.fence), leaseCheck, lease, states, String(set.length), ...set, ...remove];
      return (await run(UPDATE, id, args)) === 1;
    },

    async get(id: RecordId, tx?: unknown): Promise<StoredRecord | null> {
      refuseTransaction(tx);
      return decode((await run(GET, id, [])) as unknown[]);
    },

    /** Always 0: Redis expires records natively (each write sets PEXPIREAT), so there is nothing to purge. */
    async purgeExpired(_now: number, _limit: number): Promise<number> {
      return 0;
    },

    async close(): Promise<void> {
      closed = true;
      const pending = connecting;
      connecting = undefined;
      owned = undefined;
      // Only a client the store created: a passed-in client belongs to the caller.
      const c = await pending?.catch(() => undefined);
      if (!c) return;
      if (c.isOpen && c.close) await c.close();
      else if (c.isOpen && c.quit) await c.quit();
      else dispose(c);
    },
  };
}

/**
 * The hash key of a record: `<prefix>r:<len(tenant)>:<tenant>:<len(action)>:<action>:<key>`. The
 * lengths (in UTF-16 units) make the split unambiguous although every part may contain ':'.
 */
export function recordKey(prefix: string, id: RecordId): string {
  return `${prefix}r:${id.tenant.length}:${id.tenant}:${id.action.length}:${id.action}:${id.key}`;
}

function refuseTransaction(tx: unknown): void {
  if (tx !== undefined) throw new InvalidArgumentError('the redis store cannot join a transaction');
}

// EVALSHA sends 40 bytes instead of the script; the server loses its script cache on restart or
// SCRIPT FLUSH, and EVAL both runs the script and caches it again for the next EVALSHA.
async function evalScript(client: RedisClientLike, script: RedisScript, key: string, args: string[]) {
  try {
    return await client.sendCommand(['EVALSHA', script.sha, '1', key, ...args]);
  } catch (error) {
    if (!(error instanceof Error) || !error.message.startsWith('NOSCRIPT')) throw error;
    return client.sendCommand(['EVAL', script.source, '1', key, ...args]);
  }
}

async function openClient(url: string): Promise<OwnedClient> {
  let redis: typeof import('redis');
  try {
    redis = await import('redis');
  } catch (cause) {
    throw new OncelyError('INVALID_ARGUMENT', "redisStore({ url }) needs the 'redis' package: npm install redis", {
      cause,
    });
  }
  // node-redis reconnects forever and queues commands meanwhile by default, so a request would
  // hang while Redis is down. Instead a failed connect rejects at once, a dropped connection
  // closes the client (client() then makes a new one), and no command waits offline.
  const c = redis.createClient({
    url,
    disableOfflineQueue: true,
    socket: { reconnectStrategy: false },
  }) as unknown as OwnedClient;
  // Without a listener an 'error' event would crash the process; the failing command already
  // carries the error to the caller.
  c.on('error', () => {});
  await c.connect();
  return c;
}

function dispose(c: OwnedClient): void {
  try {
    c.destroy?.();
  } catch {
    // Already torn down by the driver; nothing is left to release.
  }
}

// Turns HGETALL pairs back into a record: numbers were stored as decimal strings and a null as an
// absent field. A client with a Buffer type mapping gives Buffers, hence String().
function decode(pairs: unknown[]): StoredRecord | null {
  if (pairs.length === 0) return null;
  const fields: Record<string, string> = {};
  for (let i = 0; i + 1 < pairs.length; i += 2) fields[String(pairs[i])] = String(pairs[i + 1]);
  const record: Record<string, unknown> = {
    tenant: fields.tenant,
    action: fields.action,
    key: fields.key,
    state: fields.state as RecordState,
    fingerprint: fields.fingerprint,
    result: fields.result ?? null,
    traceId: fields.traceId,
  };
  for (const name of NUMBER_FIELDS) record[name] = Number(fields[name]);
  for (const name of NULLABLE_NUMBER_FIELDS) record[name] = fields[name] === undefined ? null : Number(fields[name]);
  return record as unknown as StoredRecord;
}
