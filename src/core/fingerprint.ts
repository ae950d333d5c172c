import { hash } from 'node:crypto';
import { OncelyError } from './errors.js';

/**
 * Canonical JSON: object keys sorted at every depth, `undefined` members dropped, `toJSON` honoured,
 * so the same business input always gives the same text whatever order its fields were built in.
 * Only values JSON keeps as they are: plain objects (prototype Object.prototype or null), arrays,
 * strings, finite numbers, booleans and null, and objects with a `toJSON` (a Date) by what it
 * returns. Anything JSON would silently turn into `{}` or `null` (a Map, a Set, a class instance,
 * Infinity, NaN) is INPUT_NOT_SERIALIZABLE: two different inputs must never hash alike.
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
      return quote(value);
    case 'boolean':
      return value ? 'true' : 'false';
    case 'number':
      // A finite number's JSON is its JavaScript text, without the cost of a JSON.stringify call.
      if (Number.isFinite(value)) return `${value}`;
      throw new OncelyError('INPUT_NOT_SERIALIZABLE', `input contains the number ${value}, which JSON writes as null`);
    case 'undefined':
    case 'function':
    case 'symbol':
      return undefined;
    case 'bigint':
      throw new OncelyError('INPUT_NOT_SERIALIZABLE', 'input contains a bigint; convert it to a string first');
  }
  const object = value as { toJSON?: () => unknown };
  if (typeof object.toJSON === 'function') return write(object.toJSON(), path);
  const array = Array.isArray(object);
  if (!array) {
    const proto = Object.getPrototypeOf(object);
    // A Map, a Set or a class instance keeps its state where JSON does not look: all would be `{}`.
    if (proto !== Object.prototype && proto !== null)
      throw new OncelyError(
        'INPUT_NOT_SERIALIZABLE',
        `input contains a ${proto?.constructor?.name ?? 'non-plain'} object; pass plain objects, arrays and primitives`,
      );
  }
  if (path.includes(object)) throw new OncelyError('INPUT_NOT_SERIALIZABLE', 'input contains a circular reference');
  path.push(object);
  let text: string;
  if (array) {
    const items = object as unknown[];
    text = '[';
    for (let i = 0; i < items.length; i++) {
      if (i > 0) text += ',';
      text += write(items[i], path) ?? 'null';
    }
    text += ']';
  } else {
    const record = object as Record<string, unknown>;
    const names = sortedKeys(record);
    text = '{';
    for (let i = 0; i < names.length; i++) {
      const name = names[i] as string;
      const member = write(record[name], path);
      if (member === undefined) continue;
      if (text.length > 1) text += ',';
      text += `${quote(name)}:${member}`;
    }
    text += '}';
  }
  path.pop();
  return text;
}

/**
 * A string as JSON text. Short strings with nothing to escape (the usual key names, codes and
 * ids) are quoted directly: a JSON.stringify call costs more than the scan. Everything else goes
 * to JSON.stringify, which escapes quotes, backslashes, control characters and lone surrogates.
 */
function quote(s: string): string {
  if (s.length > 64) return JSON.stringify(s);
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c < 0x20 || c === 0x22 || c === 0x5c || (c >= 0xd800 && c <= 0xdfff)) return JSON.stringify(s);
  }
  return `"${s}"`;
}

/**
 * An object's own enumerable keys in code-unit order, as Array.prototype.sort orders strings.
 * Inputs have a handful of keys per object, where an insertion sort costs a fraction of sort()'s
 * setup; larger objects use sort().
 */
function sortedKeys(record: object): string[] {
  const names = Object.keys(record);
  if (names.length > 16) return names.sort();
  for (let i = 1; i < names.length; i++) {
    const name = names[i] as string;
    let j = i - 1;
    for (; j >= 0 && (names[j] as string) > name; j--) names[j + 1] = names[j] as string;
    names[j + 1] = name;
  }
  return names;
}

/** SHA-256 (hex) of the canonical JSON of `input`: equal for equal business inputs. */
export function fingerprint(input: unknown): string {
  // One-shot hash (Node 20.12+): no Hash object per call.
  return hash('sha256', canonicalJson(input), 'hex');
}
