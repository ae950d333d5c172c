import { hash } from 'node:crypto';
import { OncelyError } from './errors.js';

/**
 * Canonical JSON: object keys sorted at every depth, `undefined` members dropped, `toJSON` honoured,
 * so the same business input always gives the same text whatever order its fields were built in.
 */
export function canonicalJson(value: unknown): string {
  return write(value, []) ?? 'null';
}

// Hot path (every call hashes its input): strings are built with +=, and the objects being
// written are kept in an array used as a stack, cheaper than a Set for inputs a few levels deep.
function write(value: unknown, path: object[]): string | undefined {
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
  if (typeof object.toJSON === 'function') return write(object.toJSON(), path);
  if (path.includes(object)) throw new OncelyError('INPUT_NOT_SERIALIZABLE', 'input contains a circular reference');
  path.push(object);
  let text: string;
  if (Array.isArray(object)) {
    text = '[';
    for (let i = 0; i < object.length; i++) {
      if (i > 0) text += ',';
      text += write(object[i], path) ?? 'null';
    }
    text += ']';
  } else {
    const record = object as Record<string, unknown>;
    text = '{';
    for (const name of Object.keys(record).sort()) {
      const member = write(record[name], path);
      if (member === undefined) continue;
      if (text.length > 1) text += ',';
      text += `${JSON.stringify(name)}:${member}`;
    }
    text += '}';
  }
  path.pop();
  return text;
}

/** SHA-256 (hex) of the canonical JSON of `input`: equal for equal business inputs. */
export function fingerprint(input: unknown): string {
  // One-shot hash (Node 20.12+): no Hash object per call.
  return hash('sha256', canonicalJson(input), 'hex');
}
