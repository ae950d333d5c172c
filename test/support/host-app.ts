import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { openDb } from '../../src/db/index.js';
import type { Db } from '../../src/db/types.js';
import type { AnyFlow } from '../../src/flows/define.js';
import type { App, ConsumerModule, HandlerModule } from '../../src/host/app.js';
import type { HostConfig } from '../../src/host/config.js';
import { createHost, type Host, type HostOptions } from '../../src/host/host.js';
import { recordStoreFor } from '../../src/host/records.js';
import { dropSchema, freshSchema, POSTGRES_URL } from './postgres.js';
import { selectStores } from './store-filter.js';

/** The databases every host test runs on, those ONCELY_STORES selects: a fresh SQLite file, a fresh PostgreSQL schema. */
export function hostTargets(): { name: 'sqlite' | 'postgres'; target: () => string; cleanup: () => Promise<void> }[] {
  const schema = freshSchema();
  return selectStores([
    {
      name: 'sqlite',
      target: () => join(mkdtempSync(join(tmpdir(), 'oncely-host-')), 'app.db'),
      cleanup: async () => {},
    },
    { name: 'postgres', target: () => `${POSTGRES_URL}?schema=${schema}`, cleanup: () => dropSchema(schema) },
  ] as const);
}

/** An app built in the test, not loaded from a folder: handlers, consumers and config as objects. */
export interface TestApp {
  config?: HostConfig;
  schemaSql?: string;
  handlers?: Record<string, HandlerModule>;
  consumers?: Record<string, ConsumerModule>;
  flows?: AnyFlow[];
}

/** A started host of a test app, with helpers to call it and read its database. */
export interface RunningHost {
  host: Host;
  base: string;
  /** POST /v1/invoke/<handler> with a JSON body. */
  invoke(
    handler: string,
    body: unknown,
    headers?: Record<string, string>,
  ): Promise<{ status: number; headers: Headers; body: Record<string, unknown> }>;
  /** Rows of a query on a separate connection (what is committed). */
  rows<R = Record<string, unknown>>(sql: string, params?: unknown[]): Promise<R[]>;
  stop(): Promise<void>;
}

/** Builds, migrates and starts a host for `app` on `target`; `poolSize` sizes a PostgreSQL pool; `host` is createHost's options. */
export async function startHost(
  target: string,
  app: TestApp,
  options: { poolSize?: number; host?: HostOptions } = {},
): Promise<RunningHost> {
  const open = (poolSize?: number): Promise<Db> => openDb(target, { poolSize });
  const db = await open(options.poolSize);
  const loaded: App = {
    dir: tmpdir(),
    config: app.config ?? {},
    schemaSql: app.schemaSql ?? '',
    handlers: new Map(Object.entries(app.handlers ?? {})),
    consumers: new Map(Object.entries(app.consumers ?? {})),
    flows: app.flows ?? [],
  };
  const host = await createHost(loaded, db, recordStoreFor(db), options.host);
  await host.migrate();
  const base = `http://127.0.0.1:${await host.start(0)}`;
  const reader = await open(2);
  return {
    host,
    base,
    async invoke(handler, body, headers = {}) {
      const res = await fetch(`${base}/v1/invoke/${handler}`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', ...headers },
        body: JSON.stringify(body),
      });
      return { status: res.status, headers: res.headers, body: (await res.json()) as Record<string, unknown> };
    },
    rows: <R>(sql: string, params: unknown[] = []) => reader.all<R>(sql, params),
    async stop() {
      await reader.close();
      await host.stop();
    },
  };
}

/** For waits whose duration is the point (a lease or TTL running out); each caller says why. */
// sleep: the helper itself; its callers carry the comment.
export const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));
