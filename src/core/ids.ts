import { createHash } from 'node:crypto';

/**
 * A deterministic UUID-formatted id (version 8, RFC 9562 "custom") from a record's identity and a
 * scope: the same key and scope always give the same id, in every process and on every retry.
 */
export function stableUuid(...parts: string[]): string {
  const hash = createHash('sha256');
  for (const part of parts) hash.update(`${part.length}:${part}`);
  const bytes = hash.digest().subarray(0, 16);
  bytes[6] = ((bytes[6] ?? 0) & 0x0f) | 0x80;
  bytes[8] = ((bytes[8] ?? 0) & 0x3f) | 0x80;
  const hex = bytes.toString('hex');
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}
