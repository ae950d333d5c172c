export { keyFrom } from '../core/key.js';
export { type Client, type ClientOptions, createClient, InvokeError, type InvokeResult } from './client.js';
export { type IdempotentResponse, idempotentFetch, type KeyInput, type RetryOptions } from './retry.js';
