export { type Duration, type Ttl, toMs } from './core/duration.js';
export {
  type AnyErrorCode,
  ERRORS,
  type ErrorCode,
  InProgressError,
  InvalidArgumentError,
  KeyInvalidError,
  KeyRequiredError,
  KeyReusedError,
  LeaseLostError,
  OncelyError,
  OutcomeNotStoredError,
  OutcomeUnknownError,
  ReplayedError,
  StoreUnavailableError,
} from './core/errors.js';
export { canonicalJson, fingerprint } from './core/fingerprint.js';
export { type KeyPart, keyFrom, MAX_KEY_LENGTH, validateKey } from './core/key.js';
// The metrics plumbing (the catalogue, the cells, the rates) is oncely/prometheus's; here only what
// the engine's options and decisions name.
export type { Surface } from './core/metrics.js';
export type { DecisionEvent, ObserveOptions, OncelyLogger } from './core/observer.js';
export type { LeaseExpiredPolicy, PublicRecord, RecordId, RecordState, StoredRecord } from './core/record.js';
export type { RunContext } from './engine/context.js';
export {
  createOncely,
  Oncely,
  type OncelyOptions,
  type Resolution,
  type RunRequest,
  type RunResult,
  type WrapOptions,
} from './engine/engine.js';
export type { ActionOptions, ErrorPolicy } from './engine/options.js';
export type { Reconcile, ReconcileAnswer, ReconcileOptions, ReconcileReport } from './engine/reconcile.js';
export type { Expectation, InsertResult, RecordPatch, RecordStore, WriteOptions } from './store.js';
