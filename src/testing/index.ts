/**
 * oncely/testing: prove your own handlers, tools and flow steps have their effect once, under
 * duplicate storms, crashes at each window and lost responses. Runner-agnostic: no test runner is
 * imported here; results are returned as data and failures thrown as plain errors.
 */
export type { CrashWindow, HookCall, TestHooks } from '../engine/hooks.js';
export { type CrashCase, type CrashOptions, type CrashReport, crashWindows } from './crash.js';
export { crashHooks } from './crash-hooks.js';
export { type Fault, type FaultProxy, type FaultRule, faultProxy, type SeenRequest } from './fault-proxy.js';
export { flowResult } from './flow-result.js';
export { type ManualClock, manualClock } from './manual-clock.js';
export { type CallerOutcome, invokeResult } from './outcome.js';
export {
  type DownstreamCall,
  type DownstreamEffect,
  type RecordingDownstream,
  type RecordingDownstreamOptions,
  recordingDownstream,
} from './recording-downstream.js';
export type { ChildTarget } from './spawn.js';
export { StormFailedError, type StormOptions, type StormReport, storm } from './storm.js';
