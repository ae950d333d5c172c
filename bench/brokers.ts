/**
 * The brokers part of `npm run bench` (BENCH_ONLY=brokers runs it alone), on SQLite and PostgreSQL:
 *
 * - inbox: N messages preloaded in a queue or stream, then consumed through oncely's source and
 *   `eventInbox` (each batch stored as events in one transaction, acked after the commit), beside a
 *   floor: a bare consumer on the same client library that does one
 *   `INSERT ... ON CONFLICT DO NOTHING` per message in the same database and acks it. The floor uses
 *   the database's own driver: a pg pool on PostgreSQL; on SQLite a better-sqlite3 connection of its
 *   own with oncely's settings (WAL, synchronous FULL), one commit per message. On SQLite the same
 *   floor through oncely's Db seam is shown beside it (not checked): the seam commits concurrent
 *   statements together, one fsync per burst, which no bare consumer does.
 * - outbox: N committed outbox rows delivered by `OutboxRelay` to oncely's target (each marked
 *   delivered after the broker's confirm), beside a bare relay: select one pending row, publish,
 *   await the confirm, update it, row after row.
 *
 * Target: oncely at least 1.0x each floor. Rounds alternate floor and oncely; the best is kept.
 * Environment: BENCH_BROKERS_N (messages per inbox run, default 2000), BENCH_BROKERS_OUTBOX_N
 * (rows per outbox run, default 600), BENCH_BROKERS_ROUNDS (default 2), BENCH_BROKERS_PART (inbox or
 * outbox only), PG_URL or DATABASE_URL.
 */
import { performance } from 'node:perf_hooks';
import Database from 'better-sqlite3';
import { eventInbox } from '../src/brokers/inbox.js';
import type { BrokerMessage, BrokerSource } from '../src/brokers/types.js';
import { openDb } from '../src/db/index.js';
import { migrate } from '../src/db/migrate.js';
import type { Db } from '../src/db/types.js';
import { EventQueue } from '../src/host/events.js';
import { enqueue, OutboxRelay } from '../src/host/outbox.js';
import { outboxMigrations } from '../src/host/outbox-sql.js';
import { type BenchBroker, CAPACITY, natsBench, rabbitmqBench, redisBench } from './brokers-clients.js';
import { type Check, envInt, formatCheck, formatOps, markdownTable } from './harness.js';
import { PG_URL, runId, scratchDir } from './setup.js';

const N = envInt('BENCH_BROKERS_N', 2_000);
const OUTBOX_N = envInt('BENCH_BROKERS_OUTBOX_N', 600);
const ROUNDS = envInt('BENCH_BROKERS_ROUNDS', 2);
const TARGET = 1;
// BENCH_BROKERS_PART=inbox or outbox runs one of the two.
const PARTS = (
  [
    ['inbox', inboxRound],
    ['outbox', outboxRound],
  ] as const
).filter(([part]) => (process.env.BENCH_BROKERS_PART ?? part) === part);

const log = (line: string) => process.stderr.write(`${line}\n`);

export interface BrokersResult {
  part: 'inbox' | 'outbox';
  broker: string;
  db: 'sqlite' | 'postgres';
  /** Messages (inbox) or rows (outbox) per second, best round. */
  oncely: number;
  floor: number;
  /** SQLite inbox: the floor's statements through oncely's Db seam, which commits them in bursts (shown, not checked). */
  seamFloor?: number;
}

/** One database of the part, with the event queue's and the outbox's tables. */
interface BenchDb {
  name: 'sqlite' | 'postgres';
  db: Db;
  /** SQLite: the database file, for the floor's own connection. */
  file?: string;
  events: EventQueue;
  dispose(): Promise<void>;
}

async function timed(run: () => Promise<unknown>, count: number): Promise<number> {
  const start = performance.now();
  await run();
  return (count * 1000) / (performance.now() - start);
}

/** Wraps a source so `done` resolves once the inbox acked `n` messages (a retried one counts when acked later). */
function counting(source: BrokerSource, n: number): { source: BrokerSource; done: Promise<void> } {
  let acked = 0;
  let finish: () => void = () => {};
  const done = new Promise<void>((resolve) => {
    finish = resolve;
  });
  const count = (message: BrokerMessage): BrokerMessage => ({
    ...message,
    ack: async () => {
      await message.ack();
      if (++acked === n) finish();
    },
  });
  const wrapped: BrokerSource = {
    name: source.name,
    start: (handle) => source.start((batch) => handle(batch.map(count))),
    stop: () => source.stop(),
    status: () => source.status(),
  };
  return { source: wrapped, done };
}

async function inboxRound(broker: BenchBroker, target: BenchDb, round: number): Promise<number[]> {
  const tag = `${broker.name.replace(/\W/g, '')}${round}${runId()}`;
  const ids = Array.from({ length: N }, (_, i) => `${tag}-${i}`);
  // The floor: a table of ids, one autocommitted INSERT ... ON CONFLICT DO NOTHING per message.
  const table = `bench_floor_${tag.replace(/\W/g, '_')}`;
  await target.db.run(`CREATE TABLE ${table} (id TEXT PRIMARY KEY)`);
  const insertSql = `INSERT INTO ${table} (id) VALUES (?) ON CONFLICT DO NOTHING`;
  const floorOf = async (insert: (id: string) => Promise<unknown>) => {
    const channel = await broker.fresh();
    await broker.preload(channel, ids);
    const rate = await timed(() => broker.bareConsume(channel, N, insert), N);
    await broker.drop(channel);
    await target.db.run(`DELETE FROM ${table}`);
    return rate;
  };
  let floor: number;
  let seamFloor: number | undefined;
  if (target.file) {
    const own = new Database(target.file);
    own.pragma('busy_timeout = 5000');
    own.pragma('journal_mode = WAL');
    own.pragma('synchronous = FULL');
    const statement = own.prepare(insertSql);
    floor = await floorOf(async (id) => statement.run(id));
    own.close();
    seamFloor = await floorOf((id) => target.db.run(insertSql, [id]));
  } else floor = await floorOf((id) => target.db.run(insertSql, [id]));

  const channel = await broker.fresh();
  await broker.preload(channel, ids);
  const { source, done } = counting(broker.source(channel, `bench-${tag}`), N);
  const inbox = eventInbox(source, { db: target.db, events: target.events });
  const oncely = await timed(async () => {
    await inbox.start();
    await done;
  }, N);
  await inbox.stop();
  await broker.drop(channel);
  const stored = await target.db.all<{ n: number | string }>(
    'SELECT COUNT(*) AS n FROM oncely_events WHERE source = ?',
    [`bench-${tag}`],
  );
  if (Number(stored[0]?.n) !== N) throw new Error(`${broker.name} inbox stored ${stored[0]?.n} of ${N} messages`);
  return seamFloor === undefined ? [oncely, floor] : [oncely, floor, seamFloor];
}

async function outboxRound(broker: BenchBroker, target: BenchDb, round: number): Promise<number[]> {
  const tag = `${broker.name.replace(/\W/g, '')}o${round}${runId()}`;
  const { db } = target;
  const payload = JSON.stringify({ orderId: 'ORD-1', amount: 100 });
  // The bare relay's own table: the same columns it reads and writes.
  const table = `bench_relay_${tag.replace(/\W/g, '_')}`;
  await db.run(
    `CREATE TABLE ${table} (id TEXT PRIMARY KEY, topic TEXT NOT NULL, payload TEXT NOT NULL, status TEXT NOT NULL, created_at BIGINT NOT NULL)`,
  );
  const floorChannel = await broker.fresh();
  await db.transaction(async (tx) => {
    for (let i = 0; i < OUTBOX_N; i++)
      await tx.run(`INSERT INTO ${table} (id, topic, payload, status, created_at) VALUES (?, ?, ?, 'pending', ?)`, [
        `${tag}-bare-${i}`,
        floorChannel,
        payload,
        i,
      ]);
  });
  const bare = await broker.barePublisher(floorChannel);
  const floor = await timed(async () => {
    for (;;) {
      const [row] = await db.all<{ id: string; topic: string; payload: string }>(
        `SELECT id, topic, payload FROM ${table} WHERE status = 'pending' ORDER BY created_at, id LIMIT 1`,
      );
      if (!row) return;
      await bare.publish(row.id, row.topic, row.payload);
      await db.run(`UPDATE ${table} SET status = 'delivered' WHERE id = ?`, [row.id]);
    }
  }, OUTBOX_N);
  await bare.close();
  await broker.drop(floorChannel);

  const channel = await broker.fresh();
  await db.transaction(async (tx) => {
    for (let i = 0; i < OUTBOX_N; i++) await enqueue(tx, `${tag}-${i}`, channel, JSON.parse(payload));
  });
  const brokerTarget = broker.target(channel);
  const relay = new OutboxRelay(db, { target: brokerTarget, inFlight: 32 });
  let delivered = 0;
  const oncely = await timed(async () => {
    while (delivered < OUTBOX_N) delivered += await relay.deliverDue();
  }, OUTBOX_N);
  await brokerTarget.close();
  await broker.drop(channel);
  return [oncely, floor];
}

async function openBenchDb(name: 'sqlite' | 'postgres', dir: string): Promise<BenchDb> {
  const schema = `bench_brokers_${runId()}`;
  const file = `${dir}/brokers.db`;
  const db = await openDb(name === 'sqlite' ? file : `${PG_URL}?schema=${schema}`);
  const events = new EventQueue(db, { consumerFor: () => undefined });
  await events.migrate();
  await migrate(db, outboxMigrations);
  return {
    name,
    db,
    ...(name === 'sqlite' ? { file } : {}),
    events,
    async dispose() {
      if (name === 'postgres') await db.run(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
      await db.close();
    },
  };
}

/** Runs every broker's inbox and outbox on both databases, ROUNDS times each, best kept. */
export async function runBrokers(): Promise<BrokersResult[]> {
  const dir = scratchDir();
  const brokers = [await natsBench(), await rabbitmqBench(), await redisBench()];
  const dbs = [await openBenchDb('sqlite', dir.path), await openBenchDb('postgres', dir.path)];
  const results: BrokersResult[] = [];
  try {
    for (const broker of brokers) {
      for (const target of dbs) {
        for (const [part, round] of PARTS) {
          let oncely = 0;
          let floor = 0;
          let seam: number | undefined;
          for (let r = 0; r < ROUNDS; r++) {
            const [o = 0, f = 0, s] = await round(broker, target, r);
            oncely = Math.max(oncely, o);
            floor = Math.max(floor, f);
            if (s !== undefined) seam = Math.max(seam ?? 0, s);
          }
          const seamNote = seam === undefined ? '' : `, through the seam ${formatOps(seam)}/s`;
          log(
            `${part} ${broker.name} ${target.name}: oncely ${formatOps(oncely)}/s, floor ${formatOps(floor)}/s${seamNote}`,
          );
          results.push({
            part,
            broker: broker.name,
            db: target.name,
            oncely,
            floor,
            ...(seam ? { seamFloor: seam } : {}),
          });
        }
      }
    }
  } finally {
    for (const target of dbs) await target.dispose().catch((error: unknown) => log(`dispose: ${String(error)}`));
    for (const broker of brokers) await broker.close().catch(() => {});
    dir.remove();
  }
  return results;
}

/** The markdown table, its notes and the ratio checks. */
export function brokersReport(results: BrokersResult[]): {
  lines: string[];
  checks: (Check & { name: string; store: string })[];
} {
  const checks: (Check & { name: string; store: string })[] = [];
  const rows = results.map((r) => {
    const check: Check = { ratio: r.oncely / r.floor, min: TARGET };
    checks.push({ name: `brokers ${r.part}/floor`, store: `${r.broker} ${r.db}`, ...check });
    const seam = r.seamFloor ? `${formatOps(r.seamFloor)} (${(r.oncely / r.seamFloor).toFixed(2)}x)` : '';
    return [r.part, r.broker, r.db, formatOps(r.oncely), formatOps(r.floor), formatCheck(check), seam];
  });
  const lines = [
    `brokers: inbox ${N.toLocaleString('en-US')} messages, outbox ${OUTBOX_N.toLocaleString('en-US')} rows per run, ` +
      `capacity ${CAPACITY}, best of ${ROUNDS} rounds, node ${process.version}`,
    '',
    markdownTable(
      ['part', 'broker', 'db', 'oncely /s', 'floor /s', 'oncely vs floor', 'floor through the seam /s'],
      rows,
    ),
    '',
    'inbox: oncely source + eventInbox (a batch stored as events in one transaction, then each acked) beside a',
    'bare consumer (prefetch/COUNT the same) doing one INSERT ... ON CONFLICT DO NOTHING per message, then its ack,',
    "on the database's driver (SQLite: its own better-sqlite3 connection, WAL, synchronous FULL, a commit each).",
    "SQLite's last column: the same floor through oncely's Db seam, which commits concurrent statements in one",
    'fsync per burst (shown, not checked: it is an oncely optimisation no bare consumer has).',
    'outbox: OutboxRelay to the broker target, inFlight 32 (a claimed batch published side by side, each row marked',
    'after its confirm, the batch marked in one transaction) beside a bare',
    'relay: SELECT one pending row, publish, await the confirm (XADD reply), UPDATE it, row after row.',
  ];
  return { lines, checks };
}
