/** The HTTP part's printed report: req/s and ratio checks, server and Redis CPU per response, the peers, correctness. */
import { availableParallelism } from 'node:os';
import { type Check, formatCheck, formatOps, markdownTable } from './harness.js';
import { CONNECTIONS, type HttpRun, PEER_ROUNDS, type PeerResult, ROUNDS, SECONDS, WARMUP_SECONDS } from './http.js';
import { heavyFramework } from './http-apps.js';

const cores = availableParallelism();

export interface HttpReport {
  lines: string[];
  checks: (Check & { name: string; store: string })[];
  /** Correctness failures: any makes the bench fail. */
  failures: string[];
}

/** µs, no decimals; a dash when not measured. */
const us = (x: number | undefined) => (x === undefined || Number.isNaN(x) ? '—' : x.toFixed(0));

/**
 * A ceiling in µs as a check: the ratio is the limit over the measured value (≥1.0x passes), so
 * CPU limits fail the bench the way ratio floors do. A value at or below zero (noise around a tiny
 * cost) counts as 1 µs.
 */
function atMost(measured: number, limit: number): Check {
  return { ratio: limit / Math.max(measured, 1), min: 1 };
}

/** `12 µs (≤20 pass)` */
function formatAtMost(measured: number, limit: number): string {
  return `${us(measured)} (≤${limit} ${measured <= limit ? 'pass' : 'FAIL'})`;
}

/** The markdown tables, their notes, the ratio checks and the correctness failures. */
export function httpReport({ results, peers, stolen }: HttpRun): HttpReport {
  const checks: HttpReport['checks'] = [];
  const failures: string[] = [];
  let checked = 0;
  const rows = results.map((r) => {
    const subject = `${r.framework} ${r.store}`;
    // A new key costs the bare request plus one engine run: the best the middleware can do.
    const ceiling = 1 / (1 / r.bare.reqPerSec + 1 / r.engine.opsPerSec);
    const uniqueCeiling: Check = { ratio: r.unique.reqPerSec / ceiling, min: 0.8 };
    checks.push({ name: 'unique/ceiling', store: subject, ...uniqueCeiling });
    checked += r.checked;
    for (const failure of r.failures) failures.push(`${subject} ${failure}`);
    return [
      r.framework,
      r.store,
      formatOps(r.bare.reqPerSec),
      formatOps(r.unique.reqPerSec),
      formatOps(r.replay.reqPerSec),
      formatOps(r.engine.opsPerSec),
      formatOps(ceiling),
      formatCheck(uniqueCeiling),
      `${(r.replay.reqPerSec / r.bare.reqPerSec).toFixed(2)}x`,
      formatOps(r.cached.reqPerSec),
      `${(r.cached.reqPerSec / r.bare.reqPerSec).toFixed(2)}x`,
    ];
  });
  const header = ['framework', 'store', 'bare req/s', 'unique req/s', 'replay req/s', 'engine ops/s', 'ceiling'];
  const table = markdownTable([...header, 'unique/ceiling', 'replay/bare', 'cached replay req/s', 'cached/bare'], rows);
  const cpuRows = results.map((r) => {
    const subject = `${r.framework} ${r.store}`;
    const bare = r.bare.serverCpu ?? Number.NaN;
    const ownNew = (r.unique.serverCpu ?? Number.NaN) - bare - r.engineMatched.serverCpu;
    // As for new keys, the engine's own run (here its store read and decoding) is not the middleware's.
    const overBare = (r.replay.serverCpu ?? Number.NaN) - bare;
    const ownReplay = overBare - r.engineReplay.serverCpu;
    const heavy = heavyFramework(r.framework);
    const [newLimit, replayLimit] = heavy ? [40, 40] : [20, 15];
    checks.push({ name: `own CPU per new key ≤${newLimit} µs`, store: subject, ...atMost(ownNew, newLimit) });
    checks.push({ name: `own CPU per replay ≤${replayLimit} µs`, store: subject, ...atMost(ownReplay, replayLimit) });
    return [
      r.framework,
      r.store,
      us(r.bare.serverCpu),
      us(r.unique.serverCpu),
      us(r.replay.serverCpu),
      us(r.cached.serverCpu),
      `${us(r.engine.serverCpu)}; ${us(r.engineMatched.serverCpu)}`,
      us(r.engineReplay.serverCpu),
      formatAtMost(ownNew, newLimit),
      us(overBare),
      formatAtMost(ownReplay, replayLimit),
      us(r.unique.redisCpu),
      us(r.replay.redisCpu),
      r.open ? `${formatOps(r.open.reqPerSec)} req/s: ${us(r.open.serverCpu)}, Redis ${us(r.open.redisCpu)}` : '—',
    ];
  });
  const cpuHeader = ['framework', 'store', 'bare', 'unique', 'replay', 'cached replay', 'engine run: loop; paced'];
  cpuHeader.push(
    'engine replay, paced',
    'own, new key: unique − bare − engine paced',
    'replay − bare',
    'own, replay: replay − bare − engine replay paced',
    'Redis: unique',
    'replay',
    'open loop, new keys',
  );
  const lines = [
    `HTTP: POST /orders, autocannon ${CONNECTIONS} connections, pipelining 1, best of ${ROUNDS} rounds of ${SECONDS} s` +
      ` per measurement after ${WARMUP_SECONDS} s warm-ups`,
    '',
    table,
    '',
    'CPU per response, µs (user + system of the server process, in the runs above; engine run: per op;',
    'Redis: of the redis-server, from INFO cpu around each run, on Redis only):',
    '',
    markdownTable(cpuHeader, cpuRows),
    '',
    `bare = the same route and handler without the middleware; unique = a new Idempotency-Key per request;`,
    `replay = keys answered before; cached replay = the same, through an engine with replayCache (answered`,
    `from memory, no store read; off by default); engine = once.run in the same server process, same engine and store,`,
    `${CONNECTIONS} concurrent, the input and 201 response the middleware stores, no HTTP ("loop": ${CONNECTIONS} workers`,
    `back to back; "paced": the same operations started at the rate of the unique run shown, at most ${CONNECTIONS}`,
    `under way, since the store's CPU per write depends on how many writes share a commit or a round trip, and a`,
    `loop's workers finish and start again together); engine replay: the engine's keys run again, cycling through`,
    `all of them, paced at the replay run's rate; ceiling = 1/(1/bare + 1/engine loop),`,
    `what a new key would reach if the middleware itself cost nothing. The server is a child`,
    `process (node --import tsx, running the built package from dist as an installed app would), one per framework`,
    `and store (fresh SQLite file, PostgreSQL schema, Redis prefix);`,
    `autocannon runs in the bench process. Server and load generator share the same ${cores} cores in every`,
    `HTTP run alike; the engine run has them to itself (no load generator). CPU per response depends little on`,
    `that sharing; waits (fsync, network) are not CPU. Own CPU: what the middleware adds besides the engine's run,`,
    `for new keys and for replays alike`,
    `(targets: 20 µs per new key and 15 per replay on Fastify, Hono and fetch; 40 on Express, Koa and NestJS).`,
    `Open loop (Redis): new keys started at half the best closed-loop rate whatever the answers, so requests`,
    `arrive one at a time; server and Redis CPU per request.`,
    ...(stolen === undefined
      ? []
      : [
          `CPU time stolen by the hypervisor during these runs: ${(stolen * 100).toFixed(0)}% of the machine's (/proc/stat).`,
        ]),
    ...floorLines(results),
    ...(peers ? peerLines(peers, checks, failures) : []),
  ];
  if (peers) checked += peers.checked;
  lines.push(
    failures.length === 0
      ? `checked ${checked.toLocaleString('en-US')} responses (all rounds and warm-ups): every unique and bare response 201, not replayed, n = 1;` +
          ' every replay 201 with the first body (and Idempotent-Replayed: true from oncely); no connection errors'
      : `CORRECTNESS FAILED: ${failures.join(' | ')}`,
  );
  return { lines, checks, failures };
}

/**
 * Where a framework has a floor (Nest: the bare route behind a no-op interceptor), what that hook
 * costs by itself and the own CPU taken over it instead of over bare. Printed, not checked.
 */
function floorLines(results: HttpRun['results']): string[] {
  const rows = results.flatMap((r) => {
    if (!r.floor) return [];
    const floor = r.floor.serverCpu ?? Number.NaN;
    return [
      [
        r.framework,
        r.store,
        us(floor),
        us(floor - (r.bare.serverCpu ?? Number.NaN)),
        us((r.unique.serverCpu ?? Number.NaN) - floor - r.engineMatched.serverCpu),
        us((r.replay.serverCpu ?? Number.NaN) - floor - r.engineReplay.serverCpu),
      ],
    ];
  });
  if (rows.length === 0) return [];
  const header = ['framework', 'store', 'floor', 'floor − bare', 'own, new key, over the floor', 'own, replay'];
  return [
    '',
    'Floor: the bare route behind a no-op interceptor (next.handle() only), what Nest charges any interceptor;',
    'own CPU as above with the floor in place of bare (µs per response, not checked):',
    '',
    markdownTable(header, rows),
  ];
}

/** The peers' table and oncely's checks against them and against bare Express. */
function peerLines(peers: PeerResult, checks: HttpReport['checks'], failures: string[]): string[] {
  for (const failure of peers.failures) failures.push(`peers ${failure}`);
  const bare = peers.bare;
  const bareCpu = bare.serverCpu ?? Number.NaN;
  const rows = peers.subjects.map((s) => [
    s.name,
    formatOps(s.unique.reqPerSec),
    `${(s.unique.reqPerSec / bare.reqPerSec).toFixed(2)}x`,
    formatOps(s.replay.reqPerSec),
    `${(s.replay.reqPerSec / bare.reqPerSec).toFixed(2)}x`,
    us((s.unique.serverCpu ?? Number.NaN) - bareCpu),
    us((s.replay.serverCpu ?? Number.NaN) - bareCpu),
    us(s.unique.redisCpu),
    us(s.replay.redisCpu),
  ]);
  const oncely = peers.subjects.find((s) => s.name === 'oncely');
  const others = peers.subjects.filter((s) => s.name !== 'oncely');
  if (oncely && others.length > 0) {
    const better = Math.max(...others.map((s) => s.unique.reqPerSec));
    const subject = 'express redis vs peers';
    const overBare = (oncely.unique.serverCpu ?? Number.NaN) - bareCpu;
    checks.push(
      { name: 'new key/better peer', store: subject, ratio: oncely.unique.reqPerSec / better, min: 1 },
      { name: 'new key/bare', store: subject, ratio: oncely.unique.reqPerSec / bare.reqPerSec, min: 0.85 },
      { name: 'replay/bare', store: subject, ratio: oncely.replay.reqPerSec / bare.reqPerSec, min: 0.95 },
      { name: 'server CPU over bare per new key ≤45 µs', store: subject, ...atMost(overBare, 45) },
      { name: 'Redis CPU per new key ≤13 µs', store: subject, ...atMost(oncely.unique.redisCpu ?? Number.NaN, 13) },
    );
  }
  const header = ['subject', 'new key req/s', 'new key/bare', 'replay req/s', 'replay/bare'];
  header.push('server CPU over bare: new key', 'replay', 'Redis CPU: new key', 'replay');
  return [
    '',
    `HTTP peers: Express 5 on the same Redis, bare ${formatOps(bare.reqPerSec)} req/s (server CPU ${us(bareCpu)} µs` +
      ` per response), ${CONNECTIONS} connections, best of ${PEER_ROUNDS} interleaved rounds of ${SECONDS} s; CPU µs per response:`,
    '',
    markdownTable(header, rows),
    '',
    'oncely: the ioredis store (redisStore({ url })); express-idempotency with express-idempotency-redis-adapter',
    '(node-redis); @node-idempotency/core with @node-idempotency/storage-adapter-redis (node-redis), wired into',
    'Express as its README shows. Targets for oncely: new keys ≥1.0x the better peer and ≥0.85x bare, replays',
    '≥0.95x bare, server CPU over bare ≤45 µs and Redis CPU ≤13 µs per new key.',
  ];
}
