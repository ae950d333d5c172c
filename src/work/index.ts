export type { Held } from './renewal.js';
export type { ClaimScope, Statement, WorkTable } from './sql.js';
export { type Claim, type RetryPlan, type WorkOptions, WorkQueue } from './work.js';
