export {
  type AnyFlow,
  defineFlow,
  type FlowDefinition,
  type FlowRun,
  type RetryPolicy,
  type StepContext,
  type StepOptions,
} from './define.js';
export { createFlows, type FlowRecord, Flows, type FlowsOptions } from './flows.js';
export { StepFailed, type StepHookCall } from './replay.js';
