import { defineConfig } from 'vitest/config';
import full from './vitest.config.js';

/**
 * `npm run test:quick`: the files that need no service and no child process (SQLite runs in the
 * process), for a quick check while working: core, keys and fingerprints, the catalogues and their
 * README tables, layering, the HTTP gate, the test kit's in-process parts, SQLite's migration.
 */
const QUICK = [
  'test/core/*.test.ts',
  'test/layering.test.ts',
  'test/suite-hygiene.test.ts',
  'test/engine/names.test.ts',
  'test/engine/replay-cache.test.ts',
  'test/engine/reconcile-agent.test.ts',
  'test/http/gate.test.ts',
  'test/http/fetch-body.test.ts',
  'test/http/observability.test.ts',
  'test/host/webhooks.test.ts',
  'test/host/stop.test.ts',
  'test/prometheus/prometheus.test.ts',
  'test/stores/sqlite/sqlite-migration.test.ts',
  'test/flows/store-errors.test.ts',
  'test/agent/dispatch.test.ts',
  'test/agent/example.test.ts',
  'test/dashboard/mount.test.ts',
  'test/testing/clock-hooks.test.ts',
  'test/testing/flows-clock.test.ts',
  'test/testing/invoke-result.test.ts',
  'test/testing/fault-proxy.test.ts',
  'examples/shop/test/shop.kit.test.ts',
];

// Every service the tests reach through an environment variable points at a closed port: a file that
// uses one after all fails here, loudly, instead of the tier quietly needing the service.
const UNREACHABLE = {
  POSTGRES_URL: 'postgres://postgres@127.0.0.1:1/test',
  REDIS_URL: 'redis://127.0.0.1:1',
  MYSQL_URL: 'mysql://root@127.0.0.1:1/test',
  RABBITMQ_URL: 'amqp://guest:guest@127.0.0.1:1',
};

export default defineConfig({
  ...full,
  test: { ...full.test, include: QUICK, env: UNREACHABLE },
});
