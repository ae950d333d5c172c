import type { DataStore } from 'oncely/host';
import { must } from './shop.js';

/** A product, or a 404 the client sees in the reply envelope. */
export async function loadProduct(store: DataStore, sku: string) {
  const product = must(await store.get('products', { sku }));
  if (!product) throw Object.assign(new Error(`no product ${sku}`), { status: 404, code: 'PRODUCT_UNKNOWN' });
  return product as { sku: string; priceCents: number; stock: number };
}
