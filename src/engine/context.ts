import { randomUUID } from 'node:crypto';
import { stableUuid } from '../core/ids.js';
import type { StoredRecord } from '../core/record.js';

/** What a function run under a claim knows about it. */
export interface RunContext {
  /** The key: pass it downstream (payment gateways, mailers) so they dedupe too. */
  readonly idempotencyKey: string;
  readonly action: string;
  readonly tenant: string;
  /** 1 for the first execution, growing with each takeover or released failure. */
  readonly attempt: number;
  /** The fencing token of this claim; a downstream can refuse writes carrying an older one. */
  readonly fence: number;
  /** One per business intent, the same across retries. */
  readonly traceId: string;
  /** One per physical attempt. */
  readonly requestId: string;
  /** Fires when the lease is lost: stop work that has not yet had an effect. */
  readonly signal: AbortSignal;
  /** A deterministic UUID-formatted id for `scope` under this key: the same on every retry. */
  stableId(scope: string): string;
  /** A key for the i-th sub-effect of this intent (`<key>:<i>`), stable across retries. */
  subKey(index: number | string): string;
}

/** Builds the context of one execution of a claimed record; the signal is made only if asked for. */
export function createContext(record: StoredRecord, signal: () => AbortSignal): RunContext {
  return {
    idempotencyKey: record.key,
    action: record.action,
    tenant: record.tenant,
    attempt: record.attempts,
    fence: record.fence,
    traceId: record.traceId,
    requestId: randomUUID(),
    get signal() {
      return signal();
    },
    stableId: (scope) => stableUuid(record.tenant, record.action, record.key, scope),
    subKey: (index) => `${record.key}:${index}`,
  };
}
