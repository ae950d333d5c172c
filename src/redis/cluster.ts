import type { RecordId } from '../core/record.js';
import { memberOf } from './listing.js';

/**
 * How many shards a store on Redis Cluster spreads its records over. Each shard is one hash tag,
 * so one slot: its records and its two index sets (in_progress, unknown) live together, and one
 * script run may name any of them. A record's shard comes from its id alone, so every process
 * finds it in the same one. Fixed, because it is the data's layout: a store with another count
 * would look for records in the wrong shard. Sixteen spreads the records over up to sixteen
 * masters; more would split a burst of callers into smaller script runs (one per shard).
 */
export const SHARDS = 16;

const SLOTS = 16_384;

/** CRC16/XMODEM of `text`'s UTF-8 bytes: the function Redis Cluster maps a key (its hash tag) to a slot with. */
function crc16(text: string): number {
  let crc = 0;
  for (const byte of Buffer.from(text)) {
    crc ^= byte << 8;
    for (let bit = 0; bit < 8; bit++) crc = crc & 0x8000 ? ((crc << 1) ^ 0x1021) & 0xffff : (crc << 1) & 0xffff;
  }
  return crc;
}

/** The slot Redis Cluster gives the hash tag `tag`. */
export function slotOf(tag: string): number {
  return crc16(tag) % SLOTS;
}

/**
 * The hash tag of each shard: the first `<shard>.<n>` whose slot falls in the shard's sixteenth of
 * the slots. `redis-cli --cluster create` gives each master a contiguous range of slots, so shards
 * spread over the masters as evenly as their ranges allow (3 masters: 6, 5 and 5 shards).
 */
export const SHARD_TAGS: readonly string[] = Array.from({ length: SHARDS }, (_, shard) => {
  const low = (shard * SLOTS) / SHARDS;
  for (let n = 0; ; n++) {
    const tag = `${shard}.${n}`;
    const slot = slotOf(tag);
    if (slot >= low && slot < low + SLOTS / SHARDS) return tag;
  }
});

/**
 * The prefix of each shard's keys: `<prefix>{<tag>}`, under which its records (`r:...`) and index
 * sets (`i:<state>`) are named exactly as a single Redis names them under the store's prefix.
 */
export function shardPrefixes(prefix: string): string[] {
  return SHARD_TAGS.map((tag) => `${prefix}{${tag}}`);
}

/** The shard of a record, from its id (the same text as its key past `r:`). */
export function shardOf(id: RecordId): number {
  return crc16(memberOf(id)) % SHARDS;
}
