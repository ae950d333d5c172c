/**
 * A record's stored outcome as an operator reads it: the value or the error a replay answers. The
 * admin API's record detail shows it (the engine's public record leaves it out). A handler's
 * record keeps the HTTP response its invocation answered: shown as its status and its JSON body.
 */
import type { RecordId } from '../core/record.js';
import type { Sql } from '../db/types.js';
import { decodeResponse, type StoredResponse } from '../http/response.js';

/** What a finished record answers replays; null while nothing is stored (in progress, unknown, released). */
export type StoredResult =
  | { value: unknown }
  | { error: unknown }
  | { response: { status: number; body: unknown } }
  | null;

const isStoredResponse = (v: unknown): v is StoredResponse =>
  typeof v === 'object' &&
  v !== null &&
  typeof (v as StoredResponse).status === 'number' &&
  typeof (v as StoredResponse).body === 'string' &&
  typeof (v as StoredResponse).headers === 'object';

/** Reads the stored outcome of `id` from the host's records table (`oncely_records`) with `sql`. */
export async function storedResult(sql: Sql, id: RecordId): Promise<StoredResult> {
  const [row] = await sql.all<{ result: string | null }>(
    'SELECT result FROM oncely_records WHERE tenant = ? AND action = ? AND key = ?',
    [id.tenant, id.action, id.key],
  );
  if (!row?.result) return null;
  // The engine's outcome encoding (engine/outcome.ts): { v } for a value, { e } for a failure.
  const outcome = JSON.parse(String(row.result)) as { v?: unknown; e?: unknown };
  if ('e' in outcome) return { error: outcome.e };
  if (!isStoredResponse(outcome.v)) return { value: outcome.v };
  const response = decodeResponse(outcome.v);
  const text = Buffer.from(response.body).toString('utf8');
  let body: unknown = text;
  try {
    body = JSON.parse(text);
  } catch {
    // Not JSON: shown as the text it is.
  }
  return { response: { status: response.status, body } };
}
