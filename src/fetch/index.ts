export type { IdempotencyOptions } from '../http/gate.js';
export { type FetchHandler, type FetchIdempotencyOptions, idempotent } from './handler.js';
