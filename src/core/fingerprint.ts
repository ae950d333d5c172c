import { createHash } from 'node:crypto';
import { OncelyError } from './errors.js';

/**
 * Canonical JSON: object keys sorted at every depth, `undefined` members dropped, `toJSON` honoured,
 * so the same business input always gives the same text whatever order its fields were built in.
 */
export function canonicalJson(value: unknown): string {
  return write(value, new Set()) ?? 'null';
}

function write(value: unknown, seen: Set<object>): string | undefined {
  if (value === null) return 'null';
  switch (typeof value) {
    case 'string':
    case 'boolean':
      return JSON.stringify(value);
    case 'number':
      return Number.isFinite(value) ? JSON.stringify(value) : 'null';
    case 'undefined':
    case 'function':
    case 'symbol':
      return undefined;
    case 'bigint':
      throw new OncelyError('INPUT_NOT_SERIALIZABLE', 'input contains a bigint; convert it to a string first');
  }
  const object = value as { toJSON?: () => unknown };
  if (typeof object.toJSON === 'function') return write(object.toJSON(), seen);
  if (seen.has(object)) throw new OncelyError('INPUT_NOT_SERIALIZABLE', 'input contains a circular reference');
  seen.add(object);
  let text: string;
  if (Array.isArray(object)) {
    text = `[${object.map((item) => write(item, seen) ?? 'null').join(',')}]`;
  } else {
    const record = object as Record<string, unknown>;
    const members: string[] = [];
    for (const name of Object.keys(record).sort()) {
      const member = write(record[name], seen);
      if (member !== undefined) members.push(`${JSON.stringify(name)}:${member}`);
    }
    text = `{${members.join(',')}}`;
  }
  seen.delete(object);
  return text;
}

/** SHA-256 (hex) of the canonical JSON of `input`: equal for equal business inputs. */
export function fingerprint(input: unknown): string {
  return createHash('sha256').update(canonicalJson(input)).digest('hex');
}
