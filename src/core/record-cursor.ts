import { OncelyError } from './errors.js';
import type { RecordId } from './record.js';

// Well above the longest id (names and keys are bounded, see key.ts), so no real cursor is refused.
const MAX_CURSOR_LENGTH = 16_384;
const BASE64URL = /^[A-Za-z0-9_-]+$/;

/**
 * The cursor of a listing that pages in id order: the last id of the page, as base64url JSON. Opaque
 * to callers; the SQL stores share it, so a cursor survives moving between them.
 */
export function encodeCursor(id: RecordId): string {
  return Buffer.from(JSON.stringify([id.tenant, id.action, id.key])).toString('base64url');
}

/** Reads encodeCursor's text back; anything else is CURSOR_INVALID. */
export function decodeCursor(cursor: string): RecordId {
  const parts = parse(cursor);
  if (!Array.isArray(parts) || parts.length !== 3 || !parts.every((part) => typeof part === 'string' && part !== ''))
    throw invalid();
  const [tenant, action, key] = parts as [string, string, string];
  return { tenant, action, key };
}

function parse(cursor: string): unknown {
  if (typeof cursor !== 'string' || cursor.length > MAX_CURSOR_LENGTH || !BASE64URL.test(cursor)) throw invalid();
  try {
    return JSON.parse(Buffer.from(cursor, 'base64url').toString('utf8'));
  } catch {
    throw invalid();
  }
}

const invalid = () => new OncelyError('CURSOR_INVALID', 'cursor must be the cursor of a previous page');
