/**
 * A map that keeps at most `max` entries: the least recently used goes first. Every cache of
 * oncely that a caller's input can grow (replayed records, prepared statements) uses it, so none
 * can take the process's memory with distinct keys.
 * @example
 * const statements = new Lru<string, Statement>(500);
 * const hit = statements.get(sql) ?? statements.set(sql, prepare(sql));
 */
export class Lru<K, V> {
  // A Map iterates in insertion order; a hit is moved to the end, so the first key is the oldest.
  private readonly entries = new Map<K, V>();

  constructor(readonly max: number) {
    if (!Number.isInteger(max) || max < 1) throw new RangeError(`an LRU holds at least one entry, got ${max}`);
  }

  /** The entries held now, never more than `max`. */
  get size(): number {
    return this.entries.size;
  }

  /** The value of `key`, now the most recently used; undefined when absent. */
  get(key: K): V | undefined {
    const hit = this.entries.get(key);
    if (hit === undefined) return undefined;
    this.entries.delete(key);
    this.entries.set(key, hit);
    return hit;
  }

  /** Keeps `value` as the most recently used, dropping the oldest entry past `max`; returns `value`. */
  set(key: K, value: V): V {
    this.entries.delete(key);
    this.entries.set(key, value);
    if (this.entries.size > this.max) this.entries.delete(this.entries.keys().next().value as K);
    return value;
  }

  /** Forgets `key`. */
  delete(key: K): void {
    this.entries.delete(key);
  }
}
