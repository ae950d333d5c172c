import { randomUUID } from 'node:crypto';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import mysql from 'mysql2/promise';
import pg from 'pg';
import { createClient } from 'redis';
import { names as mysqlNames, recordSteps as mysqlRecordSteps } from '../src/mysql/sql.js';
import { names as pgNames, recordMigrations as pgRecordMigrations } from '../src/postgres/sql.js';
import { RECORD_MIGRATIONS as SQLITE_MIGRATIONS } from '../src/sqlite/sql.js';
import type { Operation } from './harness.js';
import {
  dropPrefix,
  dropSchema,
  MYSQL_POOL_MAX,
  MYSQL_URL,
  NODE_REDIS_OPTIONS,
  PG_POOL_MAX,
  PG_URL,
  recordKey,
  storeDriverClient,
} from './setup.js';

/**
 * A floor: the two bare statements one first execution needs, run one after the other per
 * operation through the store's own driver and settings: the claim insert, then the result update.
 */
export interface Floor {
  op: Operation;
  close(): Promise<void>;
}

const TTL_MS = 24 * 60 * 60 * 1000;
const LEASE_MS = 30_000;
// A SHA-256 in hex, as the engine stores it; the floor does not hash.
const FINGERPRINT = 'f'.repeat(64);

/** The row the claim inserts, with the values the engine would give it. */
function claimRow(i: number) {
  const now = Date.now();
  return {
    tenant: 'bench',
    action: 'bench',
    key: `k${i}`,
    state: 'in_progress',
    fingerprint: FINGERPRINT,
    fence: 1,
    attempts: 1,
    leaseUntil: now + LEASE_MS,
    result: null as string | null,
    traceId: randomUUID(),
    createdAt: now,
    updatedAt: now,
    completedAt: null as number | null,
    expiresAt: now + TTL_MS,
  };
}

/** The result the update stores: what the engine encodes for `{ ok: true, id }`. */
const resultOf = (i: number) => JSON.stringify({ v: { ok: true, id: i } });

/** SQLite: its own file with the store's table and pragmas, autocommit statements (one commit each). */
export function sqliteFloor(dir: string): Floor {
  const db = new Database(join(dir, 'floor.db'));
  db.pragma('busy_timeout = 5000');
  db.pragma('journal_mode = WAL');
  db.pragma('synchronous = FULL');
  for (const step of SQLITE_MIGRATIONS.steps) for (const statement of [step.sqlite].flat()) db.exec(statement);
  const insert = db.prepare(`INSERT INTO oncely_records (tenant, action, key, state, fingerprint, fence, attempts,
    lease_until, result, trace_id, created_at, updated_at, completed_at, expires_at)
    VALUES (@tenant, @action, @key, @state, @fingerprint, @fence, @attempts, @leaseUntil, @result, @traceId,
    @createdAt, @updatedAt, @completedAt, @expiresAt) ON CONFLICT DO NOTHING`);
  const update = db.prepare(`UPDATE oncely_records SET state = ?, result = ?, lease_until = NULL, completed_at = ?,
    updated_at = ?, expires_at = ? WHERE tenant = ? AND action = ? AND key = ?`);
  return {
    async op(i) {
      const row = claimRow(i);
      insert.run(row);
      const now = Date.now();
      update.run('succeeded', resultOf(i), now, now, now + TTL_MS, row.tenant, row.action, row.key);
    },
    async close() {
      db.close();
    },
  };
}

/** PostgreSQL: a pg Pool as large as the store's, the store's table in a scratch schema. */
export async function postgresFloor(schema: string): Promise<Floor> {
  const pool = new pg.Pool({ connectionString: PG_URL, max: PG_POOL_MAX });
  pool.on('error', () => {});
  const n = pgNames(schema, 'records');
  await pool.query(`CREATE SCHEMA "${schema}"`);
  for (const step of pgRecordMigrations(n).steps)
    for (const statement of [step.postgres].flat()) await pool.query(statement);
  const insert = `INSERT INTO ${n.records} (tenant, action, key, state, fingerprint, fence, attempts, lease_until,
    result, trace_id, created_at, updated_at, completed_at, expires_at)
    VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14) ON CONFLICT DO NOTHING`;
  const update = `UPDATE ${n.records} SET state = $1, result = $2, lease_until = NULL, completed_at = $3,
    updated_at = $4, expires_at = $5 WHERE tenant = $6 AND action = $7 AND key = $8`;
  return {
    async op(i) {
      const r = claimRow(i);
      await pool.query(insert, [
        r.tenant,
        r.action,
        r.key,
        r.state,
        r.fingerprint,
        r.fence,
        r.attempts,
        r.leaseUntil,
        r.result,
        r.traceId,
        r.createdAt,
        r.updatedAt,
        r.completedAt,
        r.expiresAt,
      ]);
      const now = Date.now();
      await pool.query(update, ['succeeded', resultOf(i), now, now, now + TTL_MS, r.tenant, r.action, r.key]);
    },
    async close() {
      await dropSchema(pool, schema);
      await pool.end();
    },
  };
}

/**
 * MySQL/MariaDB: a mysql2 pool as large and as configured as the store's, the store's table in a
 * scratch database; the claim is the store's insert-if-absent (ON DUPLICATE KEY with a no-op).
 */
export async function mysqlFloor(database: string): Promise<Floor> {
  const pool = mysql.createPool({ uri: MYSQL_URL, connectionLimit: MYSQL_POOL_MAX, charset: 'utf8mb4' });
  const n = mysqlNames(database, 'oncely_records');
  await pool.query(`CREATE DATABASE \`${database}\``);
  for (const step of mysqlRecordSteps(n)) for (const statement of step.statements) await pool.query(statement);
  const insert = `INSERT INTO ${n.records} (tenant, action, \`key\`, state, fingerprint, fence, attempts, lease_until,
    result, trace_id, created_at, updated_at, completed_at, expires_at)
    VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON DUPLICATE KEY UPDATE fence = fence`;
  const update = `UPDATE ${n.records} SET state = ?, result = ?, lease_until = NULL, completed_at = ?,
    updated_at = ?, expires_at = ? WHERE tenant = ? AND action = ? AND \`key\` = ?`;
  return {
    async op(i) {
      const r = claimRow(i);
      await pool.query(insert, [
        r.tenant,
        r.action,
        r.key,
        r.state,
        r.fingerprint,
        r.fence,
        r.attempts,
        r.leaseUntil,
        r.result,
        r.traceId,
        r.createdAt,
        r.updatedAt,
        r.completedAt,
        r.expiresAt,
      ]);
      const now = Date.now();
      await pool.query(update, ['succeeded', resultOf(i), now, now, now + TTL_MS, r.tenant, r.action, r.key]);
    },
    async close() {
      await pool.query(`DROP DATABASE IF EXISTS \`${database}\``);
      await pool.end();
    },
  };
}

/** Sends one raw command through a Redis client. */
type Send = (command: string, args: string[]) => Promise<unknown>;

/**
 * Redis: two plain commands per operation, the claim `SET key record NX PXAT` (the cheapest
 * conditional insert) and the result `SET key record XX PXAT`, through the store's own driver:
 * an ioredis client made as the store makes its own.
 */
export async function redisFloor(prefix: string): Promise<Floor> {
  const client = await storeDriverClient();
  return redisFloorOn(
    prefix,
    (command, args) => client.call(command, args),
    async () => {
      await client.quit();
    },
  );
}

/** The same two commands through node-redis, the other Node driver, which batches writes per event-loop turn. */
export async function nodeRedisFloor(prefix: string): Promise<Floor> {
  const client = createClient(NODE_REDIS_OPTIONS);
  client.on('error', () => {});
  await client.connect();
  return redisFloorOn(
    prefix,
    (command, args) => client.sendCommand([command, ...args]),
    () => client.close(),
  );
}

function redisFloorOn(prefix: string, send: Send, close: () => Promise<void>): Floor {
  return {
    async op(i) {
      const row = claimRow(i);
      const key = recordKey(prefix, row.key);
      const claimed = await send('SET', [key, JSON.stringify(row), 'NX', 'PXAT', String(row.expiresAt)]);
      if (claimed === null) throw new Error(`floor key ${key} already claimed`);
      const now = Date.now();
      const done = {
        ...row,
        state: 'succeeded',
        result: resultOf(i),
        leaseUntil: null,
        completedAt: now,
        updatedAt: now,
      };
      await send('SET', [key, JSON.stringify(done), 'XX', 'PXAT', String(now + TTL_MS)]);
    },
    async close() {
      await dropPrefix((args) => send(args[0] as string, args.slice(1)), prefix);
      await close();
    },
  };
}
