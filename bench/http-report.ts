/** The HTTP part's printed report: req/s and ratio checks, server CPU per response, correctness. */
import { availableParallelism } from 'node:os';
import { type Check, formatCheck, formatOps, markdownTable } from './harness.js';
import { CONNECTIONS, type HttpResult, ROUNDS, SECONDS, WARMUP_SECONDS } from './http.js';

const cores = availableParallelism();

export interface HttpReport {
  lines: string[];
  checks: (Check & { name: string; store: string })[];
  /** Correctness failures: any makes the bench fail. */
  failures: string[];
}

/** The markdown table, its notes, the ratio checks and the correctness failures. */
export function httpReport(results: HttpResult[]): HttpReport {
  const checks: HttpReport['checks'] = [];
  const failures: string[] = [];
  let checked = 0;
  const rows = results.map((r) => {
    const subject = `${r.framework} ${r.store}`;
    const uniqueEngine: Check = { ratio: r.unique.reqPerSec / r.engine.opsPerSec, min: 0.9 };
    const replayBare: Check = { ratio: r.replay.reqPerSec / r.bare.reqPerSec, min: 0.5 };
    checks.push({ name: 'unique/engine', store: subject, ...uniqueEngine });
    checks.push({ name: 'replay/bare', store: subject, ...replayBare });
    checked += r.checked;
    for (const failure of r.failures) failures.push(`${subject} ${failure}`);
    return [
      r.framework,
      r.store,
      formatOps(r.bare.reqPerSec),
      formatOps(r.unique.reqPerSec),
      formatOps(r.replay.reqPerSec),
      formatOps(r.engine.opsPerSec),
      formatCheck(uniqueEngine),
      formatCheck(replayBare),
      formatOps(r.cached.reqPerSec),
      `${(r.cached.reqPerSec / r.bare.reqPerSec).toFixed(2)}x`,
    ];
  });
  const header = ['framework', 'store', 'bare req/s', 'unique req/s', 'replay req/s', 'engine ops/s'];
  const table = markdownTable([...header, 'unique/engine', 'replay/bare', 'cached replay req/s', 'cached/bare'], rows);
  const cpuRows = results.map((r) => {
    const us = (x: number | undefined) => (x === undefined ? '—' : x.toFixed(0));
    const own = (r.unique.serverCpu ?? Number.NaN) - (r.bare.serverCpu ?? Number.NaN) - r.engine.serverCpu;
    return [r.framework, r.store, us(r.bare.serverCpu), us(r.unique.serverCpu), us(r.replay.serverCpu)].concat([
      us(r.cached.serverCpu),
      us(r.engine.serverCpu),
      us(own),
    ]);
  });
  const cpuHeader = ['framework', 'store', 'bare', 'unique', 'replay', 'cached replay', 'engine run'];
  cpuHeader.push('unique − bare − engine');
  const lines = [
    `HTTP: POST /orders, autocannon ${CONNECTIONS} connections, pipelining 1, best of ${ROUNDS} rounds of ${SECONDS} s` +
      ` per measurement after ${WARMUP_SECONDS} s warm-ups`,
    '',
    table,
    '',
    'server CPU per response, µs (user + system of the server process, in the runs above; engine run: per op):',
    '',
    markdownTable(cpuHeader, cpuRows),
    '',
    `bare = the same route and handler without the middleware; unique = a new Idempotency-Key per request;`,
    `replay = keys answered before; cached replay = the same, through an engine with replayCache (answered`,
    `from memory, no store read; off by default); engine = once.run in the same server process, same engine and store,`,
    `${CONNECTIONS} concurrent, the input and 201 response the middleware stores, no HTTP. The server is a child`,
    `process (node --import tsx), one per framework and store (fresh SQLite file, fresh PostgreSQL schema);`,
    `autocannon runs in the bench process. Server and load generator share the same ${cores} cores in every`,
    `HTTP run alike; the engine run has them to itself (no load generator), so unique/engine also charges`,
    `the middleware with the CPU autocannon takes. CPU per response does not depend on that sharing; waits`,
    `(fsync, network) are not CPU. unique − bare − engine: what the middleware adds besides the engine's run.`,
    failures.length === 0
      ? `checked ${checked.toLocaleString('en-US')} responses (all rounds and warm-ups): every unique and bare response 201, not replayed, n = 1;` +
        ' every replay 201 with Idempotent-Replayed: true and the first body; no connection errors'
      : `CORRECTNESS FAILED: ${failures.join(' | ')}`,
  ];
  return { lines, checks, failures };
}
