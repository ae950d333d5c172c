import type { HostConfig } from '../../../src/host/index.js';

/** The dashboard tests' app: unsigned test webhooks, one attempt before a dead letter. */
export default {
  sources: { hooks: { kind: 'id-field', idField: 'id', typeField: 'type', unsigned: true } },
  tenant: (headers) => headers['x-account'],
  events: { maxAttempts: 1, backoff: 10, lease: '1s' },
} satisfies HostConfig;
