import type { HostConfig } from 'oncely/host';

export default {
  sources: {
    // The fallback secret is for a first run on a laptop; a deployment sets SHOP_WEBHOOK_SECRET.
    shop: {
      kind: 'standard-webhooks',
      secret: process.env.SHOP_WEBHOOK_SECRET ?? 'whsec_c2hvcC1leGFtcGxlLXdlYmhvb2stc2VjcmV0',
    },
  },
  tenant: (headers) => headers['x-account'],
  // Short lease: a host killed mid-consumer hands its events over within seconds.
  events: { maxAttempts: 5, baseDelayMs: 100, leaseMs: 2_000 },
} satisfies HostConfig;
