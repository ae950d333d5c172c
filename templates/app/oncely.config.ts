import { defineConfig, env } from 'oncely/host';

export default defineConfig({
  sources: {
    // Standard Webhooks. `oncely init` generated the fallback secret for this folder so a first run
    // works on a laptop; a deployment sets PAYMENTS_WEBHOOK_SECRET (several secrets while rotating).
    payments: { kind: 'standard-webhooks', secret: env('PAYMENTS_WEBHOOK_SECRET', '__WEBHOOK_SECRET__') },
  },
  // Failed consumers retry with backoff, then become dead letters (`npx oncely events dead list`).
  events: { maxAttempts: 5 },
});
