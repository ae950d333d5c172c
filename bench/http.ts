/**
 * The HTTP part of `npm run bench`: for each framework on SQLite and on PostgreSQL, requests/s of
 * the bare route, of the middleware on unique keys and on replays, and the engine's own
 * `once.run` throughput in the same server process. The server runs in a child process
 * (bench/http-server.ts); autocannon drives it from this process.
 *
 * Environment: BENCH_HTTP_SECONDS (per measurement, default 2), BENCH_HTTP_ROUNDS (default 2, best
 * kept), BENCH_HTTP_WARMUP (seconds per warm-up, default 1), PG_URL or DATABASE_URL.
 */
import { type ChildProcess, fork } from 'node:child_process';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { envInt, formatOps, type Timing } from './harness.js';
import { FRAMEWORKS, type Framework } from './http-apps.js';
import { drive, type LoadResult, type Mode, newBook } from './http-load.js';
import type { ServerCommand, ServerReply } from './http-server.js';
import { dropSchema, PG_URL, runId, scratchDir } from './setup.js';

export const CONNECTIONS = 32;
export const SECONDS = envInt('BENCH_HTTP_SECONDS', 2);
export const WARMUP_SECONDS = envInt('BENCH_HTTP_WARMUP', 1);
export const ROUNDS = envInt('BENCH_HTTP_ROUNDS', 2);
const STORES = ['sqlite', 'postgres'] as const;
const SERVER = fileURLToPath(new URL('./http-server.ts', import.meta.url));

const log = (line: string) => process.stderr.write(`${line}\n`);

export interface HttpResult {
  framework: Framework;
  store: string;
  bare: LoadResult;
  unique: LoadResult;
  replay: LoadResult;
  /** Replays through the engine with `replayCache`: answered from memory once seen. */
  cached: LoadResult;
  engine: EngineTiming;
  /** Responses checked, in every run of this server. */
  checked: number;
  /** The runs with responses that failed a check. */
  failures: string[];
}

/** The engine loop's timing, with the server's CPU per op (user + system, µs). */
export type EngineTiming = Timing & { serverCpu: number };

/** A running http-server.ts child and a way to ask it things. */
class Server {
  private constructor(
    private readonly child: ChildProcess,
    readonly bare: number,
    readonly guarded: number,
    readonly cached: number,
  ) {}

  static async start(framework: Framework, store: string, where: string): Promise<Server> {
    const child = fork(SERVER, [framework, store, where, PG_URL], { execArgv: ['--import', 'tsx'] });
    const ready = await reply(child);
    if (!('ready' in ready)) throw new Error(`the ${framework} server did not start: ${JSON.stringify(ready)}`);
    return new Server(child, ready.bare, ready.guarded, ready.cached);
  }

  async engine(warmup: number, maxMs: number): Promise<EngineTiming> {
    const got = await this.ask({ engine: { warmup, maxMs, concurrency: CONNECTIONS } });
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

/**
 * One framework on one store: warm-ups of every mode, then ROUNDS rounds of bare, unique, the
 * engine loop and replay, the best of each kept (as in the engine bench: on a shared machine, noise
 * only ever slows a run down). The engine loop runs right after the unique keys, on a table of
 * about the same size; replays cycle through every key answered so far.
 */
async function measureOne(framework: Framework, store: string, where: string): Promise<HttpResult> {
  const server = await Server.start(framework, store, where);
  try {
    const book = newBook();
    const scratch = newBook();
    const loads: LoadResult[] = [];
    const run = async (mode: Mode, seconds: number, port = mode === 'bare' ? server.bare : server.guarded) => {
      const cpu = await server.cpu();
      const load = await drive({
        port,
        mode,
        seconds,
        connections: CONNECTIONS,
        book: mode === 'bare' ? scratch : book,
      });
      load.serverCpu = ((await server.cpu()) - cpu) / load.responses;
      loads.push(load);
      return load;
    };
    for (const mode of ['bare', 'unique', 'replay'] as const) await run(mode, WARMUP_SECONDS);
    await run('replay', WARMUP_SECONDS, server.cached);
    const timed: Record<Mode, LoadResult[]> = { bare: [], unique: [], replay: [] };
    const cachedRuns: LoadResult[] = [];
    const engines: EngineTiming[] = [];
    for (let round = 0; round < ROUNDS; round++) {
      timed.bare.push(await run('bare', SECONDS));
      timed.unique.push(await run('unique', SECONDS));
      engines.push(await server.engine(round === 0 ? 1_000 : 1, SECONDS * 1000));
      timed.replay.push(await run('replay', SECONDS));
      cachedRuns.push(await run('replay', SECONDS, server.cached));
    }
    const fastest = (runs: LoadResult[]) => runs.reduce((a, b) => (b.reqPerSec > a.reqPerSec ? b : a));
    const top = (mode: Mode) => fastest(timed[mode]);
    const cached = fastest(cachedRuns);
    const engine = engines.reduce((a, b) => (b.opsPerSec > a.opsPerSec ? b : a));
    const [bare, unique, replay] = [top('bare'), top('unique'), top('replay')];
    log(
      `http ${framework} ${store}: bare ${formatOps(bare.reqPerSec)}, unique ${formatOps(unique.reqPerSec)},` +
        ` replay ${formatOps(replay.reqPerSec)}, cached replay ${formatOps(cached.reqPerSec)} req/s;` +
        ` engine ${formatOps(engine.opsPerSec)} ops/s`,
    );
    // Every response is checked, warm-ups and slower rounds included.
    const failures = loads.filter((l) => l.bad > 0).map((l) => `${l.mode}: ${l.bad} bad (${l.problems.join('; ')})`);
    const checked = loads.reduce((sum, l) => sum + l.responses, 0);
    return { framework, store, bare, unique, replay, cached, engine, checked, failures };
  } finally {
    await server.close();
  }
}

/** Every framework on a fresh SQLite file, then on a fresh PostgreSQL schema (dropped after). */
export async function runHttp(): Promise<HttpResult[]> {
  const id = runId();
  const dir = scratchDir();
  const results: HttpResult[] = [];
  try {
    for (const store of STORES) {
      for (const framework of FRAMEWORKS) {
        if (store === 'sqlite') {
          results.push(await measureOne(framework, store, join(dir.path, `http-${framework}.db`)));
          continue;
        }
        const schema = `bench_http_${id}_${framework}`;
        try {
          results.push(await measureOne(framework, store, schema));
        } finally {
          const client = new pg.Client({ connectionString: PG_URL });
          await client.connect();
          await dropSchema(client, schema).finally(() => client.end());
        }
      }
    }
  } finally {
    dir.remove();
  }
  return results;
}
