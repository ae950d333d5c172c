export type { IdempotencyOptions } from '../http/gate.js';
export { type FastifyIdempotencyOptions, idempotency } from './plugin.js';
