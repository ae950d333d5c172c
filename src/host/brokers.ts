/**
 * The host's brokers: the sources of `oncely.config.ts` `brokers` feeding the event queue through
 * the inbox, and the outbox routed per topic to broker `targets` and/or the app's own consumers.
 */
import { createSource, createTarget } from '../brokers/config.js';
import { type EventIntake, eventInbox, type Inbox } from '../brokers/inbox.js';
import type { BrokerTarget, SourceStatus } from '../brokers/types.js';
import { OncelyError } from '../core/errors.js';
import type { OncelyLogger } from '../core/observer.js';
import type { Db } from '../db/types.js';
import type { HostConfig } from './config.js';
import type { OutboxTarget } from './outbox.js';

/** The outbox route that names the app's own consumers (beside broker target names). */
export const CONSUMERS = 'consumers';

// Without an app logger a broker's changes of state and refused messages still reach whoever runs
// the host: one line each on stderr.
const STDERR: OncelyLogger = {
  info: (fields, message) => void process.stderr.write(`${message} ${JSON.stringify(fields)}\n`),
  warn: (fields, message) => void process.stderr.write(`${message} ${JSON.stringify(fields)}\n`),
  error: (fields, message) => void process.stderr.write(`${message} ${JSON.stringify(fields)}\n`),
};

/** What `GET /v1/brokers` answers: each source's and target's state, and lag where the broker tells it. */
export interface BrokerStatus {
  sources: Record<string, SourceStatus>;
  targets: Record<string, SourceStatus>;
}

/** The broker sources and targets of one host. */
export interface HostBrokers {
  /** The relay's target: each topic to its routes (default the app's consumers), one after the other. */
  readonly target: OutboxTarget;
  /** Starts every source (each connects and reconnects by itself). */
  start(): Promise<void>;
  /** Stops the sources (batches in flight finish) and closes the targets. */
  stop(): Promise<void>;
  status(): BrokerStatus;
}

/**
 * Builds the brokers of a host config; checks names and routes now, so a bad config fails at start.
 * `consumers` is the app's own consumers as an outbox target.
 */
export async function hostBrokers(
  config: HostConfig,
  deps: { db: Db; events: EventIntake; consumers: OutboxTarget; logger?: OncelyLogger },
): Promise<HostBrokers> {
  const logger = deps.logger ?? STDERR;
  const sourceConfigs = Object.entries(config.brokers ?? {});
  const targetConfigs = Object.entries(config.targets ?? {});
  for (const [name] of sourceConfigs) {
    if (Object.hasOwn(config.sources ?? {}, name) || name === 'outbox')
      throw new OncelyError(
        'CONFIG_INVALID',
        `broker source ${name}: the name is taken (a webhook source, or 'outbox', the relay's own source)`,
      );
  }
  for (const [name] of targetConfigs)
    if (name === CONSUMERS)
      throw new OncelyError('CONFIG_INVALID', `'${CONSUMERS}' is the app's own consumers, not a target name`);
  const routes = new Map<string, readonly string[]>();
  for (const [topic, to] of Object.entries(config.outbox ?? {})) {
    if (!Array.isArray(to) || to.length === 0)
      throw new OncelyError('CONFIG_INVALID', `outbox topic ${topic}: name at least one target (or '${CONSUMERS}')`);
    for (const name of to)
      if (name !== CONSUMERS && !Object.hasOwn(config.targets ?? {}, name))
        throw new OncelyError('CONFIG_INVALID', `outbox topic ${topic}: no target named ${name} in targets`);
    routes.set(topic, to);
  }

  const inboxes: Inbox[] = await Promise.all(
    sourceConfigs.map(async ([name, source]) =>
      eventInbox(await createSource(name, source, logger), { db: deps.db, events: deps.events, logger }),
    ),
  );
  const targets = new Map<string, BrokerTarget>(
    await Promise.all(
      targetConfigs.map(async ([name, target]) => [name, await createTarget(name, target, logger)] as const),
    ),
  );
  const status = (of: Iterable<[string, { status(): SourceStatus }]>) =>
    Object.fromEntries([...of].map(([name, s]) => [name, s.status()]));

  return {
    target: {
      // At least once to each: a failed route fails the delivery, and the retry delivers to all
      // again (the consumers dedupe by outbox id, JetStream by Nats-Msg-Id, oncely inboxes beyond).
      async deliver(message) {
        for (const name of routes.get(message.topic) ?? [CONSUMERS])
          await (name === CONSUMERS ? deps.consumers : (targets.get(name) as BrokerTarget)).deliver(message);
      },
    },
    async start() {
      await Promise.all(inboxes.map((inbox) => inbox.start()));
    },
    async stop() {
      await Promise.all(inboxes.map((inbox) => inbox.stop()));
      await Promise.all([...targets.values()].map((target) => target.close()));
    },
    status: () => ({
      sources: status(inboxes.map((inbox) => [inbox.source.name, inbox] as [string, Inbox])),
      targets: status(targets),
    }),
  };
}
