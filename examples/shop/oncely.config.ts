import { OncelyError } from 'oncely';
import type { HostConfig } from 'oncely/host';

// Public (it is in this file), so only a local demo may use it: ONCELY_DEMO=1 (`npm run storm`,
// `ONCELY_DEMO=1 npx oncely serve examples/shop`). Anything else needs SHOP_WEBHOOK_SECRET.
const DEMO_SECRET = 'whsec_c2hvcC1leGFtcGxlLXdlYmhvb2stc2VjcmV0';

function webhookSecret(): string {
  const secret = process.env.SHOP_WEBHOOK_SECRET;
  if (secret) return secret;
  if (process.env.ONCELY_DEMO === '1') return DEMO_SECRET;
  throw new OncelyError(
    'CONFIG_INVALID',
    'SHOP_WEBHOOK_SECRET is not set (ONCELY_DEMO=1 runs the shop locally with its public demo secret)',
  );
}

export default {
  sources: {
    shop: { kind: 'standard-webhooks', secret: webhookSecret() },
  },
  // Demo only: a client may send any x-account. A real app resolves the tenant from a verified credential.
  tenant: (headers) => headers['x-account'],
  // Short lease: a host killed mid-consumer hands its events over within seconds.
  events: { maxAttempts: 5, backoff: '100ms', lease: '2s' },
  // And a flow run whose host died is taken over by another within seconds.
  flows: { lease: '5s' },
} satisfies HostConfig;
