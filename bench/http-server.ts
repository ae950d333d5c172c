/**
 * The server side of the HTTP benchmark, run by bench/http.ts as a child process
 * (`node --import tsx bench/http-server.ts <framework|peers> sqlite <file> | postgres <schema> <url> |
 * redis <prefix> <url>`), so
 * the load generator never shares an event loop with the server. It opens one engine on the store,
 * serves the bare app and the middleware app from it on two ports, and on request measures the
 * engine's own `once.run` in this same process, on the same engine and store, at the same
 * concurrency, with the input and stored value the middleware would use for `POST /orders`. A
 * third port serves the middleware on an engine with `replayCache`, over the same records.
 *
 * With `peers` for the framework (Redis only), it serves bare Express, the oncely Express app and
 * the peers of bench/http-peers.ts, on the same Redis, instead.
 *
 * Protocol (IPC): sends { ready, ports } once listening (bare, guarded, cached, and floor where the
 * framework has one, see bench/http-apps.ts; or bare, oncely and each peer's name); answers
 * { engine: { warmup, maxMs, concurrency, replay?, rate? } } with { engine: Timing, cpu } (replay: the
 * engine's keys answered so far, run again; rate: started at that rate, at most `concurrency` under
 * way, instead of `concurrency` workers back to back), { cpu } with the CPU time this process has
 * used (user + system, µs); { close } closes and exits.
 */
import { createOncely, type Oncely, type RecordStore } from 'oncely';
import { postgresStore } from 'oncely/postgres';
import { redisStore } from 'oncely/redis';
import { sqliteStore } from 'oncely/sqlite';
import { encodeResponse } from '../dist/http/response.js';
import { measure, paced, type Timing, warmUp } from './harness.js';
import { FRAMEWORKS, type Framework, HTTP_TENANT, type RunningApp, startApp, startFloor } from './http-apps.js';
import { PEERS, startPeer } from './http-peers.js';

/** Messages from bench/http.ts. */
export type ServerCommand =
  | { engine: { warmup: number; maxMs: number; concurrency: number; replay?: boolean; rate?: number } }
  | { cpu: true }
  | { close: true };
/** Messages to bench/http.ts. */
export type ServerReply =
  | { ready: true; ports: Record<string, number> }
  | { engine: Timing; cpu: number }
  | { cpu: number }
  | { error: string };

/** CPU time used by this process so far, user and system, in µs. */
function cpuNow(): number {
  const { user, system } = process.cpuUsage();
  return user + system;
}

const send = (message: ServerReply) => process.send?.(message);

/** Records the cached engine keeps: more than a run answers, so every replay can be a hit. */
const REPLAY_CACHE = 1_000_000;

// The URL comes from the parent rather than bench/setup.ts, which imports every store (Redis too):
// the server loads only the store it serves.
function openStore(kind: string, where: string, url: string): RecordStore {
  if (kind === 'sqlite') return sqliteStore({ path: where });
  if (kind === 'postgres') return postgresStore({ connectionString: url, schema: where });
  if (kind === 'redis') return redisStore({ url, prefix: where });
  throw new Error(`unknown store ${kind}`);
}

/**
 * The engine loop: what the gate hands `once.run` for one `POST /orders` (input: method, action and
 * body; value: the encoded 201 response), minus HTTP. Its own action, so its keys never meet the
 * HTTP runs' keys.
 */
function engineOp(once: Oncely) {
  const input = { method: 'POST', action: 'POST /orders', body: { item: 'tea', amount: 3 } };
  const body = Buffer.from(JSON.stringify({ orderId: 'ord_1', item: 'tea', amount: 3, n: 1 }));
  const value = encodeResponse(
    {
      status: 201,
      headers: { 'content-type': 'application/json; charset=utf-8', location: '/orders/ord_1' },
      body,
    },
    ['content-type', 'location'],
  );
  return (replay: boolean) => async (i: number) => {
    const r = await once.run({ action: 'POST /engine', key: `e${i}`, tenant: HTTP_TENANT, input }, () => value);
    if (r.replayed !== replay) throw new Error(`engine key e${i} was ${replay ? 'not ' : ''}new`);
  };
}

async function main(): Promise<void> {
  const [framework, kind, where, url = ''] = process.argv.slice(2);
  const peers = framework === 'peers';
  if (!(peers || FRAMEWORKS.includes(framework as Framework)) || !kind || !where)
    throw new Error('usage: http-server.ts <framework|peers> <sqlite|postgres|redis> <file|schema|prefix> [url]');
  if (peers && kind !== 'redis') throw new Error('the peers run on redis only');
  const once = await createOncely({ store: openStore(kind, where, url) });
  // The same records through an engine with a replay cache large enough for every key of the run.
  const cachedOnce = await createOncely({ store: openStore(kind, where, url), replayCache: REPLAY_CACHE });
  const names = peers ? ['bare', 'oncely', ...PEERS] : ['bare', 'guarded', 'cached', 'floor'];
  const apps: RunningApp[] = peers
    ? [
        await startApp('express', undefined),
        await startApp('express', once),
        ...(await Promise.all(PEERS.map((peer) => startPeer(peer, url)))),
      ]
    : [
        await startApp(framework as Framework, undefined),
        await startApp(framework as Framework, once),
        await startApp(framework as Framework, cachedOnce),
      ];
  const floor = peers ? undefined : await startFloor(framework as Framework);
  if (floor) apps.push(floor);
  const op = engineOp(once);
  const [first, again] = [op(false), op(true)];
  let cursor = 0;
  process.on('message', (command: ServerCommand) => {
    if ('close' in command) {
      // Servers first, so no request is in flight when the engine (and the SQLite file) closes.
      Promise.all(apps.map((a) => a.close()))
        .then(() => Promise.all([once.close(), cachedOnce.close()]))
        .then(
          () => process.exit(0),
          () => process.exit(1),
        );
      return;
    }
    if ('cpu' in command) {
      send({ cpu: cpuNow() });
      return;
    }
    if (!('engine' in command)) return;
    const { warmup, maxMs, concurrency, replay = false, rate } = command.engine;
    const budget = { n: Number.MAX_SAFE_INTEGER, maxMs, concurrency };
    (async () => {
      if (replay) {
        // Replays cycle through every engine key answered so far, as the HTTP replays do through theirs.
        if (cursor === 0) throw new Error('engine replays need a first run');
        const cpu = cpuNow();
        const timing = rate ? await paced(again, rate, budget, 0, cursor) : await measure(again, budget, 0, cursor);
        send({ engine: timing, cpu: cpuNow() - cpu });
        return;
      }
      await warmUp(first, warmup, concurrency, cursor);
      cursor += warmup;
      const cpu = cpuNow();
      const timing = rate ? await paced(first, rate, budget, cursor) : await measure(first, budget, cursor);
      cursor += timing.ops;
      send({ engine: timing, cpu: cpuNow() - cpu });
    })().catch((error: unknown) => send({ error: String(error) }));
  });
  // A bench that died without closing us leaves no server behind.
  process.on('disconnect', () => process.exit(1));
  const ports: Record<string, number> = {};
  names.forEach((name, i) => {
    const app = apps[i];
    if (app) ports[name] = app.port;
  });
  send({ ready: true, ports });
}

main().catch((error: unknown) => {
  send({ error: String(error) });
  process.exit(1);
});
