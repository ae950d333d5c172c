import type { Duration } from '../core/duration.js';
import { InvalidArgumentError, OncelyError } from '../core/errors.js';
import { loadPeer } from '../core/peer.js';
import type { RedisScript } from './scripts.js';

/**
 * A connected client of either Node driver, of which the store calls one method: an ioredis
 * client's `call` (an ioredis `Cluster` too, told by its `isCluster`), or a node-redis 4, 5 or 6
 * client's `sendCommand` (a node-redis cluster client is not supported). `replicas` needs an
 * ioredis client (its `pipeline`). A client passed in stays the caller's: the store never closes it.
 */
export type RedisClientLike =
  | { call(command: string, args: string[]): Promise<unknown>; isCluster?: boolean; pipeline?: unknown }
  | { sendCommand(args: string[]): Promise<unknown> };

/** A node of a Redis Cluster to start from; the client learns the others from it. */
export interface RedisClusterNode {
  host: string;
  port: number;
}

/**
 * Where the store finds Redis: a URL it connects to itself (with ioredis), the nodes of a Redis
 * Cluster it connects to itself (an ioredis `Cluster`), or a client the caller owns.
 */
export type RedisStoreOptions = (
  | { url: string; client?: undefined; cluster?: undefined }
  | { cluster: RedisClusterNode[]; url?: undefined; client?: undefined }
  | { client: RedisClientLike; url?: undefined; cluster?: undefined }
) & {
  /** Prepended to every key the store writes; defaults to 'oncely:'. An ioredis client's own keyPrefix comes before it. */
  prefix?: string;
  /** With `url` or `cluster`: how long a command (connecting included) may wait for Redis before it fails; default '5s'. */
  timeout?: Duration;
  /** @deprecated Write `timeout`; goes in 0.2.0. */
  timeoutMs?: number;
  /**
   * Answer a write only once this many replicas have it (WAIT after each script run, on the same
   * connection), else fail it (STORE_UNAVAILABLE) after half of `timeout`; default 0. Redis
   * replicates asynchronously: without it, a master that dies right after answering may take the
   * write with it, and the replica promoted in its place never saw it (a claim lost that way lets
   * a second caller execute the key again). With 1, a write answered survives its master's death.
   */
  replicas?: number;
};

/** Sends one raw command and resolves with its reply. */
export type Send = (command: string, args: string[]) => Promise<unknown>;

/** How the store sends: `send` for reads, `write` for script runs that write records (WAIT after them when asked). */
export interface Senders {
  readonly send: Send;
  readonly write: Send;
}

type Pipeline = (commands: string[][]) => { exec(): Promise<[Error | null, unknown][] | null> };

// What the store needs from the ioredis client it created. Declared here, not imported, because
// `ioredis` is an optional peer dependency: its types must not leak into the public declarations.
export interface Ioredis {
  readonly status: string;
  call(command: string, args: string[]): Promise<unknown>;
  pipeline: Pipeline;
  connect(): Promise<unknown>;
  quit(): Promise<unknown>;
  disconnect(): void;
  on(event: 'error', listener: (error: unknown) => void): unknown;
}

/** The client the store made, and its senders bound once for the batches to send through. */
export interface OwnedClient extends Senders {
  readonly io: Ioredis;
}

/** What a write must wait for: `replicas` acknowledgements within `ms` (WAIT's arguments). */
export interface Durability {
  replicas: number;
  ms: number;
}

/** Whether `client` is an ioredis Cluster (ioredis sets `isCluster` on both its clients). */
export function isCluster(client: RedisClientLike): boolean {
  return 'isCluster' in client && client.isCluster === true;
}

/** One way to send a raw command through either driver's client, and writes that wait for `durability`. */
export function senders(client: RedisClientLike, durability: Durability): Senders {
  if ('call' in client && typeof client.call === 'function') {
    const send: Send = (command, args) => client.call(command, args);
    if (durability.replicas === 0) return { send, write: send };
    if (typeof client.pipeline !== 'function')
      throw new InvalidArgumentError('redisStore: `replicas` needs an ioredis client (its pipeline)');
    return { send, write: waiting((client.pipeline as Pipeline).bind(client), durability) };
  }
  if ('sendCommand' in client && typeof client.sendCommand === 'function') {
    if (durability.replicas > 0)
      throw new InvalidArgumentError('redisStore: `replicas` needs an ioredis client (its pipeline)');
    const send: Send = (command, args) => client.sendCommand([command, ...args]);
    return { send, write: send };
  }
  throw new InvalidArgumentError('redisStore: `client` must be a connected ioredis or node-redis client');
}

// The script run and its WAIT go as one pipeline: on a cluster ioredis sends a pipeline to the
// node of its keys, so the WAIT counts the replicas of the master that ran the script (a lone
// WAIT, keyless, would go to any node). WAIT holds the connection until it answers, so runs
// sharing it wait one replication round trip each.
function waiting(pipeline: Pipeline, { replicas, ms }: Durability): Send {
  return async (command, args) => {
    // A pipeline names each command by its ioredis method (lower case), unlike `call`.
    const replies = await pipeline([
      [command.toLowerCase(), ...args],
      ['wait', String(replicas), String(ms)],
    ]).exec();
    const [ran, waited] = replies ?? [];
    if (!ran || !waited) throw new Error('redis answered no pipeline');
    if (ran[0]) throw ran[0];
    if (waited[0]) throw waited[0];
    const acknowledged = Number(waited[1]);
    if (acknowledged < replicas)
      throw new OncelyError(
        'STORE_UNAVAILABLE',
        `redis: ${acknowledged} of ${replicas} replicas acknowledged the write within ${ms} ms`,
      );
    return ran[1];
  };
}

// EVALSHA sends 40 bytes instead of the script; the server loses its script cache on restart or
// SCRIPT FLUSH (and a promoted replica may never have seen the EVAL), and EVAL both runs the
// script and caches it again for the next EVALSHA. NOSCRIPT comes before the script runs, so
// nothing of the batch was written yet.
export function evalScript(send: Send, script: RedisScript, args: string[]): Promise<unknown> {
  return send('EVALSHA', args).catch((error: unknown) => {
    if (!(error instanceof Error) || !error.message.startsWith('NOSCRIPT')) throw error;
    const retry = args.slice();
    retry[0] = script.source;
    return send('EVAL', retry);
  });
}

/**
 * The ioredis options of a client the store makes; the benchmark gives its floor the same.
 * ioredis reconnects forever and queues commands meanwhile by default, so a request would hang
 * while Redis is down. Instead a failed connect rejects at once, a dropped connection ends the
 * client (the store then makes a new one), and no command waits offline. Commands are written to
 * the socket as they are sent (no auto-pipelining): see MAX_BATCH in store.ts for why that matters here.
 */
export function ownedClientOptions() {
  return {
    lazyConnect: true,
    enableOfflineQueue: false,
    retryStrategy: () => null,
  };
}

/**
 * The ioredis Cluster options of a cluster client the store makes. A master that fails is
 * replaced by its replica after the cluster's node timeout: ioredis then reloads the slots and
 * resends what was refused (MOVED, ASK, TRYAGAIN, CLUSTERDOWN, or the dead node's closed
 * connection) every retryDelayOnFailover ms, up to maxRedirections times, so commands ride over a
 * failover of a few seconds; the store's `timeout` bounds the wait. Commands queue while the
 * cluster (re)connects, since that is part of riding over it; a cluster that cannot connect at
 * all fails at once (no clusterRetryStrategy).
 */
function clusterOptions() {
  return {
    lazyConnect: true,
    clusterRetryStrategy: () => null,
    retryDelayOnFailover: 200,
    retryDelayOnClusterDown: 200,
    retryDelayOnTryAgain: 200,
    maxRedirections: 50,
    redisOptions: { enableOfflineQueue: true },
  };
}

type IoredisModule = {
  Redis: new (url: string, options: ReturnType<typeof ownedClientOptions>) => unknown;
  Cluster: new (nodes: RedisClusterNode[], options: ReturnType<typeof clusterOptions>) => unknown;
};

/** A client of `target` (a URL, or a cluster's nodes), not connected yet. */
export async function openClient(target: string | RedisClusterNode[], durability: Durability): Promise<OwnedClient> {
  const ioredis = (await loadPeer(() => import('ioredis'), 'redisStore({ url | cluster })', [
    'ioredis',
  ])) as unknown as IoredisModule;
  const io = (
    typeof target === 'string'
      ? new ioredis.Redis(target, ownedClientOptions())
      : new ioredis.Cluster(target, clusterOptions())
  ) as Ioredis;
  // Without a listener an 'error' event would be logged by ioredis; the failing command already
  // carries the error to the caller.
  io.on('error', () => {});
  const send = io.call.bind(io);
  return { io, send, write: durability.replicas === 0 ? send : waiting(io.pipeline.bind(io), durability) };
}

export function dispose(c: OwnedClient): void {
  try {
    c.io.disconnect();
  } catch {
    // Already torn down by the driver; nothing is left to release.
  }
}
