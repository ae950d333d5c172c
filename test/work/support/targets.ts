import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { openDb } from '../../../src/db/index.js';
import type { Db } from '../../../src/db/types.js';
import type { WorkTable } from '../../../src/work/index.js';
import { dropSchema, freshSchema, POSTGRES_URL } from '../../support/postgres.js';
import { SELECTED_STORES } from '../../support/store-filter.js';

/** One database per test: a SQLite file, or a fresh PostgreSQL schema. */
export interface Target {
  /** What `openDb` takes: a file path or a URL (children open the same). */
  url: string;
  open(): Promise<Db>;
  dispose(): Promise<void>;
}

/** The databases the work tests run on, those ONCELY_STORES selects. */
export const DIALECTS = (['sqlite', 'postgres'] as const).filter((name) => SELECTED_STORES.has(name));

export const targets: Record<'sqlite' | 'postgres', () => Target> = {
  sqlite: () => {
    const url = join(mkdtempSync(join(tmpdir(), 'oncely-work-')), 'app.db');
    return { url, open: () => openDb(url), dispose: async () => {} };
  },
  postgres: () => {
    const schema = freshSchema();
    const url = `${POSTGRES_URL}?schema=${schema}`;
    return { url, open: () => openDb(url), dispose: () => dropSchema(schema) };
  },
};

/** A queue-like table of the tests' own, so the work module is proven apart from its users. */
export const ITEMS_DDL = `CREATE TABLE IF NOT EXISTS work_items (
  id TEXT PRIMARY KEY,
  status TEXT NOT NULL,
  attempts INTEGER NOT NULL DEFAULT 0,
  fence BIGINT NOT NULL DEFAULT 0,
  next_attempt_at BIGINT NOT NULL,
  lease_until BIGINT,
  last_error TEXT,
  done_by TEXT,
  updated_at BIGINT NOT NULL
)`;

export const ITEMS: WorkTable = {
  table: 'work_items',
  key: ['id'],
  held: 'running',
  pending: 'pending',
  dead: 'dead',
  attempts: 'attempts',
  returning: ['done_by'],
  order: 'id',
  touched: 'updated_at',
};

/** Items due now. */
export const due = (now = Date.now()) => ({
  ready: { text: "status = 'pending' AND next_attempt_at <= ?", values: [now] },
});

/** Creates the table with `n` pending items `item-000`... */
export async function seed(db: Db, n: number): Promise<string[]> {
  await db.exec(ITEMS_DDL);
  const ids = Array.from({ length: n }, (_, i) => `item-${String(i).padStart(3, '0')}`);
  await db.transaction(async (tx) => {
    for (const id of ids)
      await tx.run("INSERT INTO work_items (id, status, next_attempt_at, updated_at) VALUES (?, 'pending', 0, 0)", [
        id,
      ]);
  });
  return ids;
}

export const CLAIMER = new URL('./claimer.ts', import.meta.url).pathname;
