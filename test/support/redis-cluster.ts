import { type ChildProcess, execFile, spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { until } from './wait.js';

const run = promisify(execFile);

/** A node of the cluster, as `redisStore({ cluster })` takes it. */
export interface ClusterNode {
  host: string;
  port: number;
}

/** A local Redis Cluster of 3 masters and 3 replicas, started by `startCluster`. */
export interface LocalCluster {
  /** Every node, masters and replicas (the order `redis-cli --cluster create` was given). */
  nodes: ClusterNode[];
  /** The ports of the current masters, by CLUSTER NODES as one live node sees it. */
  masters(): Promise<number[]>;
  /** Kills the node at `port` with SIGKILL (no shutdown, no last replication). */
  kill(port: number): void;
  /** Starts the node at `port` again (empty: nothing was saved); it rejoins as a replica. */
  restart(port: number): void;
  /** Resolves when every live node reports cluster_state:ok and no slot is served by a dead node. */
  waitHealthy(timeoutMs?: number): Promise<void>;
  /** Runs one redis-cli command against the node at `port` and answers its output. */
  cli(port: number, ...args: string[]): Promise<string>;
  /** Kills every node and removes the folder. */
  stop(): Promise<void>;
}

/** How long a node may be silent before the others mark it failed and its replica takes over. */
export const NODE_TIMEOUT_MS = 1_000;

// A port is taken when something listens on it; the cluster bus listens on port + 10000 too.
function free(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const server = createServer();
    server.once('error', () => resolve(false));
    server.listen(port, '127.0.0.1', () => server.close(() => resolve(true)));
  });
}

async function freePorts(count: number): Promise<number[]> {
  const ports: number[] = [];
  let port = 20_000 + Math.floor(Math.random() * 20_000);
  while (ports.length < count) {
    if ((await free(port)) && (await free(port + 10_000))) ports.push(port);
    port++;
  }
  return ports;
}

/**
 * Starts 6 `redis-server --cluster-enabled yes` on free loopback ports in a temporary folder, joins
 * them with `redis-cli --cluster create --cluster-replicas 1`, and waits until the cluster is ok and
 * every replica is in sync. Nothing is saved to disk: a killed master's data lives only in its replica.
 * `nodeTimeoutMs` (default NODE_TIMEOUT_MS, for tests of a failover) is how long a busy master may
 * be silent before its replica takes over.
 */
export async function startCluster({ nodeTimeoutMs = NODE_TIMEOUT_MS } = {}): Promise<LocalCluster> {
  const dir = mkdtempSync(join(tmpdir(), 'oncely-cluster-'));
  const ports = await freePorts(6);
  const children = new Map<number, ChildProcess>();
  const launch = (port: number) => {
    const child = spawn(
      'redis-server',
      [
        '--port',
        String(port),
        '--bind',
        '127.0.0.1',
        '--cluster-enabled',
        'yes',
        '--cluster-config-file',
        `nodes-${port}.conf`,
        '--cluster-node-timeout',
        String(nodeTimeoutMs),
        '--dir',
        dir,
        '--save',
        '',
        '--appendonly',
        'no',
        // A replica's first sync starts at once instead of after Redis's 5 s default.
        '--repl-diskless-sync-delay',
        '0',
      ],
      { stdio: 'ignore' },
    );
    children.set(port, child);
  };
  for (const port of ports) launch(port);
  const cli = async (port: number, ...args: string[]) =>
    (await run('redis-cli', ['-h', '127.0.0.1', '-p', String(port), ...args])).stdout;
  const stop = async () => {
    for (const child of children.values()) child.kill('SIGKILL');
    children.clear();
    rmSync(dir, { recursive: true, force: true });
  };
  const live = () => [...children.entries()].filter(([, c]) => c.exitCode === null && c.signalCode === null);
  // By the first node that answers (one just killed may not have exited yet).
  const masters = async () => {
    let nodes: string | undefined;
    for (const [port] of live()) {
      nodes = await cli(port, 'CLUSTER', 'NODES').catch(() => undefined);
      if (nodes) break;
    }
    if (!nodes) throw new Error('no live cluster node');
    return nodes
      .split('\n')
      .filter((line) => / (myself,)?master /.test(line) && !line.includes('fail'))
      .map((line) => Number(/:(\d+)@/.exec(line)?.[1]));
  };
  const waitHealthy = async (timeoutMs = 30_000): Promise<void> => {
    await until(
      'every cluster node ok with its replica linked, and 3 masters',
      async () => {
        const states = await Promise.all(
          live().map(async ([port]) => {
            const info = await cli(port, 'CLUSTER', 'INFO').catch(() => '');
            const replication = await cli(port, 'INFO', 'replication').catch(() => '');
            // A replica counts once its link to the master is up, so writes from now on reach it.
            return info.includes('cluster_state:ok') && !replication.includes('master_link_status:down');
          }),
        );
        const ms = await masters().catch(() => []);
        return { healthy: states.filter(Boolean).length, nodes: states.length, masters: ms.length };
      },
      (seen) => seen.healthy === seen.nodes && seen.masters === 3,
      { timeoutMs, intervalMs: 100 },
    );
  };
  try {
    for (const port of ports)
      await until(
        `redis-server on ${port} to answer PING`,
        () => cli(port, 'PING').catch((error) => String(error)),
        (answer) => answer.includes('PONG'),
        { timeoutMs: 10_000, intervalMs: 50 },
      );
    await run('redis-cli', [
      '--cluster',
      'create',
      ...ports.map((p) => `127.0.0.1:${p}`),
      '--cluster-replicas',
      '1',
      '--cluster-yes',
    ]);
    await waitHealthy();
  } catch (error) {
    await stop();
    throw error;
  }
  return {
    nodes: ports.map((port) => ({ host: '127.0.0.1', port })),
    masters,
    kill(port) {
      children.get(port)?.kill('SIGKILL');
    },
    restart: launch,
    waitHealthy,
    cli,
    stop,
  };
}
