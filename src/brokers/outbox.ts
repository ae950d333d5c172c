/**
 * The outbox relay over a user's own `Db`, for a service that is not an oncely app: messages written
 * with `enqueue(tx, ...)` in the service's transactions are published to a broker target after they
 * commit, each marked delivered only after the broker confirmed it.
 */
import { migrate } from '../db/migrate.js';
import type { Db } from '../db/types.js';
import { OutboxRelay, type RelayOptions } from '../host/outbox.js';
import { outboxMigrations } from '../host/outbox-sql.js';
import type { BrokerTarget } from './types.js';

/**
 * Creates (or upgrades) the outbox tables on `db` and returns a relay to `target`; call `start()`.
 * A broker target pipelines its publishes, so the relay sends 32 rows side by side by default
 * (`inFlight`), each marked after its own confirm.
 * @example
 * const relay = await brokerRelay(db, natsTarget({ subject: (topic) => `events.${topic}` }));
 * relay.start();
 * await db.transaction((tx) => enqueue(tx, 'ORD-1:paid', 'order.paid', { orderId: 'ORD-1' }));
 */
export async function brokerRelay(
  db: Db,
  target: BrokerTarget,
  options: Omit<RelayOptions, 'target'> = {},
): Promise<OutboxRelay> {
  await migrate(db, outboxMigrations);
  return new OutboxRelay(db, { inFlight: 32, ...options, target });
}
