import type { InsertResult } from '../store.js';
import type { RecordId, StoredRecord } from './record.js';

/**
 * What the batching SQL stores (PostgreSQL, MySQL) share about a batch of records: ids as map
 * keys, one id order, and the answers of a batch of inserts that names one id twice or mixes how
 * its times are given.
 */

/** A record id as one string, for maps of a batch's answers (JSON, so no two ids read alike). */
export const idKey = (id: RecordId): string => JSON.stringify([id.tenant, id.action, id.key]);

/** One id order for every process: overlapping batches then wait on each other instead of deadlocking. */
export const compareIds = (a: RecordId, b: RecordId): number => {
  for (const field of ['tenant', 'action', 'key'] as const)
    if (a[field] !== b[field]) return a[field] < b[field] ? -1 : 1;
  return 0;
};

/** A record to insert, and whether its times are relative to the store's clock (see WriteOptions). */
export interface Insert {
  record: StoredRecord;
  relative: boolean;
}

/** Inserts records with distinct ids; answers by idKey. */
type InsertSome = (inserts: Insert[]) => Promise<Map<string, InsertResult>>;

/**
 * Answers every insert of a batch in order: `insertSome` gets the first insert of each id, and a
 * later one of the same id shares its answer as not inserted (only the first can have inserted it).
 */
export async function insertOncePerId(inserts: readonly Insert[], insertSome: InsertSome): Promise<InsertResult[]> {
  const unique = new Map<string, Insert>();
  for (const insert of inserts) if (!unique.has(idKey(insert.record))) unique.set(idKey(insert.record), insert);
  const answers = await insertSome([...unique.values()]);
  return inserts.map((insert) => {
    const answer = answers.get(idKey(insert.record)) as InsertResult;
    return unique.get(idKey(insert.record)) === insert
      ? answer
      : { inserted: false, record: { ...answer.record }, now: answer.now };
  });
}

/**
 * Inserts records with distinct ids, `insertSome` once for those whose times are relative and once
 * for the others (one statement writes times one way); the engine's claims alone are the usual case.
 */
export async function insertByTimes(inserts: Insert[], insertSome: InsertSome): Promise<Map<string, InsertResult>> {
  const relative = inserts.filter((p) => p.relative);
  if (relative.length === 0 || relative.length === inserts.length) return insertSome(inserts);
  const answers = await insertSome(relative);
  for (const [id, answer] of await insertSome(inserts.filter((p) => !p.relative))) answers.set(id, answer);
  return answers;
}
