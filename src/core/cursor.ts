import { OncelyError } from './errors.js';
import type { RecordId } from './record.js';

// Above the longest position any listing writes: an id is bounded (see key.ts), and a Redis SCAN
// page carries the members one SCAN call found past its limit (see redis/listing.ts).
const MAX_CURSOR_LENGTH = 1_048_576;
const BASE64URL = /^[A-Za-z0-9_-]+$/;

/**
 * The one cursor format of every listing (records on each store, the admin API's pages, duplicate
 * findings): where the page ended, as base64url JSON. Opaque to callers, who only pass it back.
 */
export function encodeCursor(position: unknown): string {
  return Buffer.from(JSON.stringify(position)).toString('base64url');
}

/**
 * Reads encodeCursor's text back to the position it holds; text that is not one is CURSOR_INVALID
 * (each listing then checks the position's shape, with `invalidCursor` for one it never wrote).
 */
export function decodeCursor(cursor: unknown): unknown {
  if (typeof cursor !== 'string' || cursor.length > MAX_CURSOR_LENGTH || !BASE64URL.test(cursor)) throw invalidCursor();
  const bytes = Buffer.from(cursor, 'base64url');
  // Buffer skips what is not base64url: read back, a cursor we gave is the same text.
  if (bytes.toString('base64url') !== cursor) throw invalidCursor();
  try {
    return JSON.parse(bytes.toString('utf8'));
  } catch {
    throw invalidCursor();
  }
}

/** The error of a cursor no listing gave. */
export function invalidCursor(): OncelyError {
  return new OncelyError('CURSOR_INVALID', 'cursor must be the cursor of a previous page');
}

/** The cursor of a listing in record id order: the page's last id. The SQL stores share it. */
export function recordCursor(id: RecordId): string {
  return encodeCursor([id.tenant, id.action, id.key]);
}

/** Reads recordCursor's text back; anything else is CURSOR_INVALID. */
export function recordFromCursor(cursor: string): RecordId {
  const parts = decodeCursor(cursor);
  if (!Array.isArray(parts) || parts.length !== 3 || !parts.every((part) => typeof part === 'string' && part !== ''))
    throw invalidCursor();
  const [tenant, action, key] = parts as [string, string, string];
  return { tenant, action, key };
}
