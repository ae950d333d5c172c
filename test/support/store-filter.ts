/** The stores the shared matrices run on. */
export const STORE_NAMES = ['sqlite', 'postgres', 'mysql', 'redis', 'redis-cluster'] as const;
export type StoreName = (typeof STORE_NAMES)[number];

/**
 * `ONCELY_STORES=sqlite,postgres` runs the shared store matrices on those stores only, for a contributor
 * without the other services: a describe left with no store is not registered. Unset (CI), every store
 * runs and a missing service fails. A name that is not a store fails at once, so a typo never passes by
 * running nothing.
 */
export const SELECTED_STORES: ReadonlySet<StoreName> = (() => {
  const value = process.env.ONCELY_STORES?.trim();
  if (!value) return new Set(STORE_NAMES);
  const names = value.split(',').map((name) => name.trim());
  const unknown = names.filter((name) => !(STORE_NAMES as readonly string[]).includes(name));
  if (unknown.length > 0)
    throw new Error(`ONCELY_STORES names ${unknown.join(', ')}; the stores are ${STORE_NAMES.join(', ')}`);
  return new Set(names as StoreName[]);
})();

/** The entries of a store matrix that ONCELY_STORES selects (all of them when it is unset). */
export function selectStores<T extends { name: StoreName }>(stores: readonly T[]): T[] {
  return stores.filter((store) => SELECTED_STORES.has(store.name));
}
