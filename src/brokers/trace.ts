/**
 * The intent's trace id on a broker message, read and written under the names a webhook uses:
 * `Oncely-Trace-Id`, else a W3C `traceparent`. A source reads them from its headers (NATS),
 * properties' headers (RabbitMQ) or fields (Redis Streams); a target writes `Oncely-Trace-Id`, so
 * another oncely host consuming the broker continues the same trace.
 */
import { TRACE_HEADER, traceIdOf } from '../http/header.js';

/** The header (or field) a target sends an outbox row's trace id in. */
export const TRACE_NAME = TRACE_HEADER;

/**
 * The trace id named among a message's headers or fields; names are matched case-insensitively,
 * as HTTP's are. An unusable value is ignored, as a webhook's: the message is still taken.
 */
export function traceIdIn(entries: Iterable<readonly [string, unknown]>): string | undefined {
  const byName = new Map<string, string>();
  for (const [name, value] of entries) {
    const text = typeof value === 'string' ? value : Buffer.isBuffer(value) ? value.toString('utf8') : undefined;
    if (text !== undefined) byName.set(name.toLowerCase(), text);
  }
  return traceIdOf({ get: (name) => byName.get(name.toLowerCase()) });
}
