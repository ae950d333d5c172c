export type { App, ConsumerModule, HandlerModule, InputSchema } from './app.js';
export { defineConfig, env, type HostConfig } from './config.js';
export type { HostContext, HostLog } from './context.js';
export type { Host } from './host.js';
export { openHost } from './open.js';
export { type Operator, op } from './operators.js';
export type { OutboxMessage, OutboxTarget } from './outbox.js';
export type { Condition, DataStore, EventOutcome, HostEvent, Result, Where } from './types.js';
export { type SourceConfig, signBodyHmac, signStandardWebhook, signStripeWebhook } from './webhooks.js';
