import type { DataStore } from 'oncely/host';
import { must } from './shop.js';

/**
 * A product, or a 404 the client sees in the reply envelope. `sku` comes from the request body, so
 * anything but a string is the client's mistake (400), said before the store is asked.
 */
export async function loadProduct(store: DataStore, sku: unknown) {
  if (typeof sku !== 'string') {
    throw Object.assign(new Error('sku must be a string'), { status: 400, code: 'INPUT_INVALID' });
  }
  const product = must(await store.get('products', { sku }));
  if (!product) throw Object.assign(new Error(`no product ${sku}`), { status: 404, code: 'PRODUCT_UNKNOWN' });
  return product as { sku: string; priceCents: number; stock: number };
}
