export type { IdempotencyOptions } from '../http/gate.js';
export {
  IDEMPOTENCY_OPTIONS,
  IDEMPOTENT,
  IdempotencyInterceptor,
  Idempotent,
  type IdempotentOptions,
} from './interceptor.js';
