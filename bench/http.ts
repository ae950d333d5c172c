/**
 * The HTTP part of `npm run bench`: for each framework on SQLite, PostgreSQL and Redis, requests/s
 * of the bare route, of the middleware on unique keys and on replays, and the engine's own
 * `once.run` throughput in the same server process; then Express on Redis beside the peers
 * (bench/http-peers.ts). The server runs in a child process (bench/http-server.ts); autocannon
 * drives it from this process. Redis CPU (INFO cpu of the redis-server) is read around each run on Redis.
 *
 * Environment: BENCH_HTTP_SECONDS (per measurement, default 2), BENCH_HTTP_ROUNDS (default 2, best
 * kept), BENCH_HTTP_PEER_ROUNDS (default 3), BENCH_HTTP_WARMUP (seconds per warm-up, default 3),
 * BENCH_HTTP_STORES (comma list, default sqlite,postgres,redis), BENCH_HTTP_FRAMEWORKS (comma
 * list, default all), BENCH_HTTP_PEERS (0 skips the peers), PG_URL or DATABASE_URL, REDIS_URL.
 */
import { type ChildProcess, fork } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Redis } from 'ioredis';
import pg from 'pg';
import { envInt, formatOps, type Timing } from './harness.js';
import { FRAMEWORKS, type Framework } from './http-apps.js';
import { drive, KEY_TAG, type KeyBook, type LoadResult, type Mode, newBook } from './http-load.js';
import { PEERS } from './http-peers.js';
import type { ServerCommand, ServerReply } from './http-server.js';
import { dropSchema, PG_URL, REDIS_URL, redisCpu, runId, scratchDir } from './setup.js';

export const CONNECTIONS = 32;
export const SECONDS = envInt('BENCH_HTTP_SECONDS', 2);
// Three seconds: with one, V8's optimizing compiler still took about 12% of the server's CPU in the first measured round.
export const WARMUP_SECONDS = envInt('BENCH_HTTP_WARMUP', 3);
export const ROUNDS = envInt('BENCH_HTTP_ROUNDS', 2);
export const PEER_ROUNDS = envInt('BENCH_HTTP_PEER_ROUNDS', 3);
const ALL_STORES = ['sqlite', 'postgres', 'redis'];
const listed = (name: string, all: readonly string[]) => {
  const given = process.env[name]?.split(',').filter((x) => x !== '');
  const unknown = given?.filter((x) => !all.includes(x)) ?? [];
  if (unknown.length > 0) throw new Error(`${name}: unknown ${unknown.join(', ')} (known: ${all.join(', ')})`);
  return given ?? [...all];
};
const STORES = listed('BENCH_HTTP_STORES', ALL_STORES);
const RUN_FRAMEWORKS = listed('BENCH_HTTP_FRAMEWORKS', FRAMEWORKS) as Framework[];
const RUN_PEERS = process.env.BENCH_HTTP_PEERS !== '0';
const SERVER = fileURLToPath(new URL('./http-server.ts', import.meta.url));
// The server runs the built package (dist), as an installed app does: tsx reads the root tsconfig's
// paths, which map `oncely/...` to the sources (whose transform adds a name-keeping call per closure made).
const SERVER_TSCONFIG = fileURLToPath(new URL('./tsconfig.dist.json', import.meta.url));

const log = (line: string) => process.stderr.write(`${line}\n`);

/** What the HTTP part measured: every framework and store, then the peers on Redis. */
export interface HttpRun {
  results: HttpResult[];
  peers: PeerResult | undefined;
  /** Share of the machine's CPU time the hypervisor gave to other guests during the runs (Linux), if known. */
  stolen: number | undefined;
}

export interface HttpResult {
  framework: Framework;
  store: string;
  bare: LoadResult;
  unique: LoadResult;
  replay: LoadResult;
  /** Replays through the engine with `replayCache`: answered from memory once seen. */
  cached: LoadResult;
  /** The bare route behind the framework's no-op hook, where it has a floor (bench/http-apps.ts). */
  floor?: LoadResult;
  /** The engine loop at CONNECTIONS at a time: its throughput makes the ceiling. */
  engine: EngineTiming;
  /**
   * The engine on new keys started at the rate of the unique run kept: what the store costs when
   * operations arrive as those requests did, subtracted for own CPU. A closed loop's workers finish
   * in one batch and start the next together, so the store shares each commit or round trip among
   * more writes than HTTP traffic lets it.
   */
  engineMatched: EngineTiming;
  /** The engine's replays of its own keys the same way, at the rate of the replay run kept. */
  engineReplay: EngineTiming;
  /** Responses checked, in every run of this server. */
  checked: number;
  /** The runs with responses that failed a check. */
  failures: string[];
  /**
   * On Redis: new keys in an open loop (requests started at half the best closed-loop rate,
   * whatever the answers), for the store's batching under traffic that arrives one request at a time.
   */
  open?: LoadResult;
}

/** Express on Redis, bare, behind oncely and behind each peer, best of PEER_ROUNDS interleaved rounds. */
export interface PeerResult {
  bare: LoadResult;
  /** Per subject (oncely, then each peer): the best run on new keys and on replays. */
  subjects: { name: string; unique: LoadResult; replay: LoadResult }[];
  checked: number;
  failures: string[];
}

/** The engine loop's timing, with the server's CPU per op (user + system, µs). */
export type EngineTiming = Timing & { serverCpu: number };

/** A running http-server.ts child and a way to ask it things. */
class Server {
  private constructor(
    private readonly child: ChildProcess,
    /** Each app's port, by name (bare, guarded, cached, floor if any; or bare, oncely and each peer). */
    readonly ports: Record<string, number>,
  ) {}

  static async start(framework: Framework | 'peers', store: string, where: string): Promise<Server> {
    const url = store === 'redis' ? REDIS_URL : PG_URL;
    const child = fork(SERVER, [framework, store, where, url], {
      execArgv: ['--import', 'tsx'],
      env: { ...process.env, TSX_TSCONFIG_PATH: SERVER_TSCONFIG },
    });
    const ready = await reply(child);
    if (!('ready' in ready)) throw new Error(`the ${framework} server did not start: ${JSON.stringify(ready)}`);
    return new Server(child, ready.ports);
  }

  port(name: string): number {
    const port = this.ports[name];
    if (port === undefined) throw new Error(`the server has no ${name} app`);
    return port;
  }

  /**
   * The engine's own once.run in the server, CONNECTIONS at a time: new keys, or (`replay`) the
   * engine keys it answered before; with `rate`, started at that rate instead (at most CONNECTIONS
   * under way), as the HTTP run's requests arrived.
   */
  async engine(warmup: number, maxMs: number, replay = false, rate?: number): Promise<EngineTiming> {
    const got = await this.ask({ engine: { warmup, maxMs, concurrency: CONNECTIONS, replay, rate } });
    if (!('engine' in got)) throw new Error(`engine run failed: ${JSON.stringify(got)}`);
    return { ...got.engine, serverCpu: got.cpu / got.engine.ops };
  }

  /** CPU time the server has used so far (µs): CPU per request does not depend on what else runs. */
  async cpu(): Promise<number> {
    const got = await this.ask({ cpu: true });
    if (!('cpu' in got)) throw new Error(`cpu query failed: ${JSON.stringify(got)}`);
    return got.cpu;
  }

  private ask(command: ServerCommand): Promise<ServerReply> {
    const answer = reply(this.child);
    this.child.send(command);
    return answer;
  }

  async close(): Promise<void> {
    if (this.child.exitCode !== null) return;
    const exited = new Promise((resolve) => this.child.once('exit', resolve));
    this.child.send({ close: true } satisfies ServerCommand);
    await exited;
  }
}

/** The child's next message; rejects if it exits first. */
function reply(child: ChildProcess): Promise<ServerReply> {
  return new Promise((resolve, reject) => {
    const onExit = (code: number | null) => reject(new Error(`the server exited (${code}) before answering`));
    child.once('exit', onExit);
    child.once('message', (message) => {
      child.off('exit', onExit);
      resolve(message as ServerReply);
    });
  });
}

/** Redis's own CPU (µs so far), read around each run on Redis; undefined on the other stores. */
type RedisCpu = Awaited<ReturnType<typeof redisCpu>> | undefined;

/**
 * Runs one load on `port` and keeps it in `loads` (every response is checked, warm-ups too),
 * with the server's CPU per response, and Redis's when `redis` is given.
 */
function runner(server: Server, redis: RedisCpu, loads: LoadResult[]) {
  return async (port: number, mode: Mode, seconds: number, book: KeyBook, marksReplays = true, rate?: number) => {
    const cpu = await server.cpu();
    const redisBefore = await redis?.read();
    const load = await drive({ port, mode, seconds, connections: CONNECTIONS, book, marksReplays, rate });
    load.serverCpu = ((await server.cpu()) - cpu) / load.responses;
    if (redis && redisBefore !== undefined) load.redisCpu = ((await redis.read()) - redisBefore) / load.responses;
    loads.push(load);
    return load;
  };
}

const fastest = (runs: LoadResult[]) => runs.reduce((a, b) => (b.reqPerSec > a.reqPerSec ? b : a));
const failuresOf = (loads: LoadResult[], subject = '') =>
  loads.filter((l) => l.bad > 0).map((l) => `${subject}${l.mode}: ${l.bad} bad (${l.problems.join('; ')})`);
const checkedOf = (loads: LoadResult[]) => loads.reduce((sum, l) => sum + l.responses, 0);

/**
 * One framework on one store: warm-ups of every mode, then ROUNDS rounds of bare, unique, the
 * engine loop and replay, the best of each kept (as in the engine bench: on a shared machine, noise
 * only ever slows a run down). The engine loop runs right after the unique keys, on a table of
 * about the same size; replays cycle through every key answered so far.
 */
async function measureOne(framework: Framework, store: string, where: string, redis: RedisCpu): Promise<HttpResult> {
  const server = await Server.start(framework, store, where);
  try {
    const book = newBook();
    const scratch = newBook();
    const loads: LoadResult[] = [];
    const load = runner(server, redis, loads);
    const [bare, guarded, cached] = [server.port('bare'), server.port('guarded'), server.port('cached')];
    const run = (mode: Mode, seconds: number, port = mode === 'bare' ? bare : guarded) =>
      load(port, mode, seconds, mode === 'bare' ? scratch : book);
    const floor = server.ports.floor;
    for (const mode of ['bare', 'unique', 'replay'] as const) await run(mode, WARMUP_SECONDS);
    await run('replay', WARMUP_SECONDS, cached);
    if (floor) await run('bare', WARMUP_SECONDS, floor);
    const timed: Record<Mode, LoadResult[]> = { bare: [], unique: [], replay: [] };
    const cachedRuns: LoadResult[] = [];
    const floorRuns: LoadResult[] = [];
    const engines: EngineTiming[] = [];
    // Each HTTP run kept with the engine run right after it, started at that run's rate.
    const matched = new Map<LoadResult, EngineTiming>();
    for (let round = 0; round < ROUNDS; round++) {
      timed.bare.push(await run('bare', SECONDS));
      if (floor) floorRuns.push(await run('bare', SECONDS, floor));
      const unique = await run('unique', SECONDS);
      timed.unique.push(unique);
      engines.push(await server.engine(round === 0 ? 1_000 : 1, SECONDS * 1000));
      matched.set(unique, await server.engine(1, SECONDS * 1000, false, unique.reqPerSec));
      const replay = await run('replay', SECONDS);
      timed.replay.push(replay);
      matched.set(replay, await server.engine(0, SECONDS * 1000, true, replay.reqPerSec));
      cachedRuns.push(await run('replay', SECONDS, cached));
    }
    const engine = engines.reduce((a, b) => (b.opsPerSec > a.opsPerSec ? b : a));
    const [unique, replay] = [fastest(timed.unique), fastest(timed.replay)];
    const pairOf = (load: LoadResult) => matched.get(load) as EngineTiming;
    const rate = Math.max(1, Math.round(unique.reqPerSec / 2));
    const open = redis ? await load(guarded, 'unique', SECONDS, book, true, rate) : undefined;
    const result = {
      framework,
      store,
      bare: fastest(timed.bare),
      unique,
      replay,
      cached: fastest(cachedRuns),
      floor: floor ? fastest(floorRuns) : undefined,
      engine,
      engineMatched: pairOf(unique),
      engineReplay: pairOf(replay),
      checked: checkedOf(loads),
      failures: failuresOf(loads),
      open,
    };
    log(
      `http ${framework} ${store}: bare ${formatOps(result.bare.reqPerSec)}, unique ${formatOps(result.unique.reqPerSec)},` +
        ` replay ${formatOps(result.replay.reqPerSec)}, cached replay ${formatOps(result.cached.reqPerSec)} req/s;` +
        ` engine ${formatOps(engine.opsPerSec)} ops/s`,
    );
    return result;
  } finally {
    await server.close();
  }
}

/**
 * Express on Redis: bare, oncely and each peer in one server process, on the same Redis. Warm-ups
 * of every subject, then PEER_ROUNDS rounds, each of bare, every subject's new keys, then every
 * subject's replays (interleaved, so a slow moment of the machine hits one round of all, not all
 * rounds of one); the best of each kept.
 */
async function measurePeers(prefix: string, redis: RedisCpu): Promise<PeerResult> {
  const server = await Server.start('peers', 'redis', prefix);
  try {
    const loads: LoadResult[] = [];
    const load = runner(server, redis, loads);
    const scratch = newBook();
    const names = ['oncely', ...PEERS];
    const books = new Map(names.map((name) => [name, newBook()]));
    const bareRuns: LoadResult[] = [];
    const runs = new Map(names.map((name) => [name, { unique: [] as LoadResult[], replay: [] as LoadResult[] }]));
    const round = async (seconds: number, keep: boolean) => {
      const bare = await load(server.port('bare'), 'bare', seconds, scratch);
      if (keep) bareRuns.push(bare);
      for (const mode of ['unique', 'replay'] as const) {
        for (const name of names) {
          const got = await load(server.port(name), mode, seconds, books.get(name) as KeyBook, name === 'oncely');
          if (keep) runs.get(name)?.[mode].push(got);
        }
      }
    };
    await round(WARMUP_SECONDS, false);
    for (let r = 0; r < PEER_ROUNDS; r++) await round(SECONDS, true);
    const subjects = names.map((name) => {
      const { unique, replay } = runs.get(name) as { unique: LoadResult[]; replay: LoadResult[] };
      return { name, unique: fastest(unique), replay: fastest(replay) };
    });
    const bare = fastest(bareRuns);
    log(
      `http peers (express redis): bare ${formatOps(bare.reqPerSec)}; ` +
        subjects
          .map((s) => `${s.name} unique ${formatOps(s.unique.reqPerSec)}, replay ${formatOps(s.replay.reqPerSec)}`)
          .join('; ') +
        ' req/s',
    );
    return { bare, subjects, checked: checkedOf(loads), failures: failuresOf(loads) };
  } finally {
    await server.close();
  }
}

/**
 * The machine's CPU ticks so far, all and stolen (the `cpu` line of /proc/stat), or undefined off
 * Linux. On a shared virtual machine, time stolen by other guests also slows what runs meanwhile
 * (caches, wake-ups), so the report prints it beside CPU figures that would move with it.
 */
function cpuTicks(): { all: number; steal: number } | undefined {
  try {
    const fields = (readFileSync('/proc/stat', 'utf8').split('\n')[0] ?? '')
      .trim()
      .split(/\s+/)
      .slice(1, 9)
      .map(Number);
    return { all: fields.reduce((a, b) => a + b, 0), steal: fields[7] ?? 0 };
  } catch {
    return undefined;
  }
}

/** Deletes every Redis key of this run: the records and the peers' keys all carry KEY_TAG. */
async function dropRedisKeys(): Promise<void> {
  const client = new Redis(REDIS_URL);
  try {
    let cursor = '0';
    do {
      const [next, keys] = await client.scan(cursor, 'MATCH', `*${KEY_TAG}*`, 'COUNT', 1000);
      cursor = next;
      if (keys.length > 0) await client.unlink(...keys);
    } while (cursor !== '0');
  } finally {
    client.disconnect();
  }
}

/**
 * Every framework on a fresh SQLite file, a fresh PostgreSQL schema (dropped after) and a fresh
 * Redis prefix (its keys deleted after), then the peers.
 */
export async function runHttp(): Promise<HttpRun> {
  const id = runId();
  const dir = scratchDir();
  const redis = STORES.includes('redis') || RUN_PEERS ? await redisCpu() : undefined;
  const results: HttpResult[] = [];
  let peers: PeerResult | undefined;
  const before = cpuTicks();
  try {
    for (const store of STORES) {
      for (const framework of RUN_FRAMEWORKS) {
        if (store === 'sqlite') {
          results.push(await measureOne(framework, store, join(dir.path, `http-${framework}.db`), undefined));
        } else if (store === 'redis') {
          results.push(await measureOne(framework, store, `bench-http-${KEY_TAG}-${framework}:`, redis));
        } else {
          const schema = `bench_http_${id}_${framework}`;
          try {
            results.push(await measureOne(framework, store, schema, undefined));
          } finally {
            const client = new pg.Client({ connectionString: PG_URL });
            await client.connect();
            await dropSchema(client, schema).finally(() => client.end());
          }
        }
      }
    }
    if (RUN_PEERS) peers = await measurePeers(`bench-http-${KEY_TAG}-peers:`, redis);
  } finally {
    dir.remove();
    await redis?.close();
    if (redis) await dropRedisKeys();
  }
  const after = cpuTicks();
  const stolen =
    before && after && after.all > before.all ? (after.steal - before.steal) / (after.all - before.all) : undefined;
  return { results, peers, stolen };
}
