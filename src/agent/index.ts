export type { Approval, ApprovalStatus } from './approvals.js';
export { Credits } from './credits.js';
export type { DeliveryState, NextAction, ToolEnvelope } from './envelope.js';
export { createRegistry, describeTool, describeTools, modelDescription, type ToolDescription } from './registry.js';
export {
  AgentRuntime,
  type AgentRuntimeOptions,
  type CallOptions,
  createAgentRuntime,
  type Decider,
} from './runtime.js';
export {
  type AnyTool,
  defineTool,
  isDestructive,
  type ReadContext,
  type ReadToolDeclaration,
  type Tool,
  type ToolContext,
  type ToolDeclaration,
  type ToolSchema,
} from './tool.js';
