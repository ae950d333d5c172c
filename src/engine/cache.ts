import { Lru } from '../core/lru.js';
import type { PublicRecord, RecordId } from '../core/record.js';

/** A finished record as a replay needs it: what callers see, and the stored outcome. */
interface Finished {
  record: PublicRecord;
  result: string;
}

/**
 * Recently finished records of this process, so a duplicate is answered without a store read.
 * Safe because a succeeded or failed record never changes until it expires: no engine path
 * writes to one, and purges only take expired ones. What it cannot see is a record deleted by
 * hand, which is why it is off unless asked for. Bounded: the least recently used entry goes
 * first, so memory stays at `max` entries whatever the number of keys.
 */
export class ReplayCache {
  private readonly entries: Lru<string, Finished>;

  constructor(max: number) {
    this.entries = new Lru(max);
  }

  /** The finished record of `id` while it still answers replays at `now`. */
  get(id: RecordId, now: number): Finished | undefined {
    const name = nameOf(id);
    const hit = this.entries.get(name);
    if (hit === undefined) return undefined;
    if (hit.record.expiresAt !== null && hit.record.expiresAt <= now) {
      this.entries.delete(name);
      return undefined;
    }
    return hit;
  }

  /** Remembers a record the store holds as succeeded or failed; anything else is not final. */
  set(record: PublicRecord, result: string | null): void {
    if (result === null || (record.state !== 'succeeded' && record.state !== 'failed')) return;
    // A copy: the caller hands `record` on to its own caller, who may change it.
    this.entries.set(nameOf(record), { record: { ...record }, result });
  }
}

// Lengths first, so a tenant or action containing the separator cannot make two ids one name.
const nameOf = (id: RecordId): string => `${id.tenant.length}:${id.action.length}:${id.tenant}:${id.action}:${id.key}`;
