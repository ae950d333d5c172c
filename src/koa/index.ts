export type { IdempotencyOptions } from '../http/gate.js';
export { idempotency } from './middleware.js';
