import type { RouteIndex } from '../host/routes.js';
import { adminModeLine } from '../ops/admin-auth.js';

/**
 * What `oncely serve` prints once listening: where everything is and a first request to send.
 * `adminToken` is what the host read at creation (ONCELY_ADMIN_TOKEN): the line says which mode the admin API is in.
 */
export function serveBanner(
  index: RouteIndex,
  dir: string,
  adminToken: string | undefined = process.env.ONCELY_ADMIN_TOKEN,
): string {
  const base = new URL(index.health).origin;
  const lines = [`oncely serving ${dir} on ${base}  (GET ${base}/ answers this index as JSON)`];
  lines.push(
    '',
    index.handlers.length > 0
      ? 'handlers (send the same line twice: the second answer is replayed):'
      : 'handlers: none (add handlers/<group>/<name>.ts)',
  );
  for (const h of index.handlers) lines.push(`  ${h.id}`, `    ${h.curl}`);
  lines.push('', index.webhooks.length > 0 ? 'webhooks:' : 'webhooks: none (add sources to oncely.config.ts)');
  for (const w of index.webhooks) lines.push(`  ${w.source} (${w.kind})  POST ${w.url}`, `    ${w.signing}`);
  const { sources, targets, status } = index.brokers;
  if (sources.length + targets.length > 0)
    lines.push(
      '',
      `brokers (each one's state and lag: GET ${status}):`,
      ...(sources.length > 0 ? [`  sources: ${sources.join(', ')}`] : []),
      ...(targets.length > 0 ? [`  outbox targets: ${targets.join(', ')}`] : []),
    );
  lines.push(
    '',
    `health:       GET ${index.health}`,
    `event stats:  GET ${index.eventStats}`,
    `stats:        GET ${index.stats}  (totals and the four rates; npx oncely stats ${dir})`,
    `metrics:      GET ${index.metrics}  (Prometheus)`,
    `dead letters: ${index.deadLetters}`,
    adminModeLine(adminToken || undefined),
    `dashboard:    ${base}/oncely/  (${adminToken ? 'asks for ONCELY_ADMIN_TOKEN' : 'from this machine only'})`,
    'stop with Ctrl-C or SIGTERM: in-flight work finishes first',
  );
  return lines.join('\n');
}
