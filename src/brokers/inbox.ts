/**
 * The inbox: broker messages in. A source's batch is stored as events in one transaction, the
 * transaction commits, and only then is each message acknowledged; a repeat of a stored (source, id)
 * is acknowledged as a duplicate, however long after (oncely's retention, not the broker's window).
 * A transaction refused for one message's data is split until that message is found and rejected;
 * one that failed otherwise gives its messages back to the broker for redelivery. No broker client is
 * imported here: sources come from their own modules (`nats.ts`, `rabbitmq.ts`, `redis-streams.ts`).
 */

import { isContractError, OncelyError } from '../core/errors.js';
import { MAX_EVENT_TYPE_LENGTH, validateEventType, validateKey } from '../core/key.js';
import type { OncelyLogger } from '../core/observer.js';
import { dataRefusal } from '../db/refusal.js';
import type { Db, Sql } from '../db/types.js';
import type { RunContext } from '../engine/context.js';
import type { Oncely, RunRequest } from '../engine/engine.js';
import { errorText } from '../host/failure-log.js';
import type { BrokerMessage, BrokerSource, SourceStatus } from './types.js';

/** What the inbox needs of the event queue: `EventQueue.intake` with a transaction, and `intakeMany` where it has it. */
export interface EventIntake {
  intake(
    source: string,
    id: string,
    type: string,
    data: unknown,
    tx: Sql,
    how: { surface: 'broker'; traceId?: string },
  ): Promise<'accepted' | 'duplicate' | 'conflict'>;
  /** `EventQueue.wake`: called after the commit, so the stored events are claimed now, not at the next poll. */
  wake?(): void;
  /** `EventQueue.intakeMany`: a whole batch in the transaction, its outcomes in order. */
  intakeMany?(
    source: string,
    events: readonly { id: string; type: string; data: unknown; traceId?: string }[],
    tx: Sql,
  ): Promise<('accepted' | 'duplicate' | 'conflict')[]>;
}

/** How many messages of one batch ended each way. */
export interface BatchOutcome {
  accepted: number;
  duplicate: number;
  conflict: number;
  /** Refused for good (no id, an invalid id or type, an unreadable body, one the database refuses): never processed. */
  rejected: number;
  /** Given back to the broker: the transaction failed for another reason than a message (the database down). */
  retried: number;
}

/** Options of an inbox into the event queue. */
export interface InboxOptions {
  /** The database the event queue is on. */
  db: Db;
  /** The event queue (the host's `events`). */
  events: EventIntake;
  /** Where refused messages and failed batches are reported; default one line on stderr each. */
  logger?: OncelyLogger;
}

/** A broker source driven by one way of taking its batches; `start` and `stop` it with the process. */
export class Inbox {
  constructor(
    readonly source: BrokerSource,
    private readonly take: (batch: readonly BrokerMessage[]) => Promise<void>,
  ) {
    checkSourceName(source.name);
  }

  /** Starts the source; its batches are taken until `stop()`. */
  start(): Promise<void> {
    return this.source.start((batch) => this.take(batch));
  }

  /** Stops the source after the batch in flight. */
  stop(): Promise<void> {
    return this.source.stop();
  }

  status(): SourceStatus {
    return this.source.status();
  }
}

/**
 * An inbox into the event queue: the host's consumers, ordering by business version, retries and
 * dead letters then apply to broker messages as to webhooks.
 * @example
 * const inbox = eventInbox(natsSource({ name: 'orders', stream: 'ORDERS', durable: 'shop' }), { db, events: host.events });
 * await inbox.start();
 */
export function eventInbox(source: BrokerSource, options: InboxOptions): Inbox {
  return new Inbox(source, async (batch) => void (await intakeBatch(source.name, batch, options)));
}

type Keyed = { message: BrokerMessage; id: string };

/**
 * Stores one batch in one transaction, then acks each message. A message that cannot be taken (no
 * id, a type or body it cannot be) is rejected first; a part the database refuses is split until
 * the message it refuses is found and rejected; a part that fails otherwise is given back.
 */
export async function intakeBatch(
  name: string,
  batch: readonly BrokerMessage[],
  options: InboxOptions,
): Promise<BatchOutcome> {
  const counts: BatchOutcome = { accepted: 0, duplicate: 0, conflict: 0, rejected: 0, retried: 0 };
  const keyed: Keyed[] = [];
  for (const message of batch) {
    const refusal = refuse(message);
    if (refusal === undefined) keyed.push({ message, id: message.id as string });
    else {
      counts.rejected++;
      await rejectMessage(message, refusal, options.logger, name);
    }
  }
  for (const { message } of keyed) message.working?.();
  await storePart(name, keyed, options, counts);
  return counts;
}

/**
 * Stores messages in one transaction and acks them once it committed. When the database refuses
 * the transaction for what a message holds, the part is split in halves, each stored on its own,
 * down to the one message refused, which is rejected with one log line: the messages read with it
 * land. Any other failure (the database down) gives the part back for redelivery.
 */
async function storePart(name: string, keyed: readonly Keyed[], options: InboxOptions, counts: BatchOutcome) {
  const { events, logger } = options;
  if (keyed.length === 0) return;
  let outcomes: ('accepted' | 'duplicate' | 'conflict')[];
  try {
    outcomes = await store(name, keyed, options);
  } catch (error) {
    if (refusedByDatabase(error)) {
      if (keyed.length === 1) {
        counts.rejected++;
        const reason = `the database refused it (${errorText(error)})`;
        return rejectMessage((keyed[0] as Keyed).message, reason, logger, name);
      }
      const half = Math.ceil(keyed.length / 2);
      await storePart(name, keyed.slice(0, half), options, counts);
      await storePart(name, keyed.slice(half), options, counts);
      return;
    }
    counts.retried += keyed.length;
    report(
      logger,
      'error',
      'broker batch not stored',
      `${name}: ${keyed.length} message(s) given back for redelivery`,
      {
        source: name,
        messages: keyed.length,
        error: errorText(error),
      },
    );
    await Promise.all(keyed.map(({ message }) => settle(message.retry(), logger, name)));
    return;
  }
  // Committed: from here a crash before the ack gets the message again, answered as a duplicate.
  for (const outcome of outcomes) counts[outcome]++;
  if (outcomes.includes('accepted')) events.wake?.();
  await Promise.all(keyed.map(({ message }) => settle(message.ack(), logger, name)));
}

/** One part of a batch in one transaction: the events' outcomes in order. */
function store(
  name: string,
  keyed: readonly Keyed[],
  { db, events }: InboxOptions,
): Promise<('accepted' | 'duplicate' | 'conflict')[]> {
  return db.transaction(async (tx) => {
    // One batch of a source at a time across processes: two batches holding the same ids (a
    // redelivery beside a copy), or counter rows, in different orders would deadlock each other.
    if (tx.dialect === 'postgres')
      await tx.run("SELECT pg_advisory_xact_lock(hashtextextended('oncely.inbox:' || ?, 0))", [name]);
    // The event queue stores a batch with a few statements in all (intakeMany); another intake, one by one.
    if (events.intakeMany)
      return events.intakeMany(
        name,
        keyed.map(({ message, id }) => ({ id, type: message.type, data: message.data, traceId: message.traceId })),
        tx,
      );
    const out: ('accepted' | 'duplicate' | 'conflict')[] = [];
    for (const { message, id } of keyed)
      out.push(
        await events.intake(name, id, message.type, message.data, tx, { surface: 'broker', traceId: message.traceId }),
      );
    return out;
  });
}

/**
 * True when a failed transaction was refused for what a message holds, not for the database's
 * state: the queue's own checks (a contract error) and the database's data and constraint errors
 * (dataRefusal: a NUL byte in text among them), the classes the record stores retry item by item too.
 */
function refusedByDatabase(error: unknown): boolean {
  return isContractError(error) || dataRefusal(error) !== undefined;
}

/** Options of an inbox over an Oncely engine, for a service that is not an oncely app. */
export interface OnceInboxOptions<T> {
  once: Oncely;
  /** The engine action every message runs under; the key is the message id. */
  action: string;
  /** The side effect of one message; it runs once per id, a redelivery replays its stored outcome. */
  handle(message: BrokerMessage, ctx: RunContext): Promise<T> | T;
  /** Engine options of the action (ttl: how long an id is remembered, default the engine's). */
  run?: Omit<RunRequest, 'action' | 'key' | 'input' | 'surface'>;
  logger?: OncelyLogger;
}

/**
 * The library form of the inbox: `message -> once.run({ action, key: message id }, handle) -> ack`.
 * A handler that fails gives the message back for redelivery (the engine released its key, unless
 * the action stores failures); a message without an id is rejected, never run without a key.
 * @example
 * const inbox = onceInbox(natsSource({ ... }), { once, action: 'ship', handle: (m) => ship(m.data) });
 * await inbox.start();
 */
export function onceInbox<T>(source: BrokerSource, options: OnceInboxOptions<T>): Inbox {
  const { once, action, handle, logger } = options;
  const name = source.name;
  const one = async (message: BrokerMessage) => {
    const refusal = refuse(message);
    if (refusal !== undefined) return rejectMessage(message, refusal, logger, name);
    message.working?.();
    try {
      await once.run(
        { ...options.run, action, key: message.id as string, input: message.data, surface: 'consumer' },
        (ctx) => handle(message, ctx),
      );
    } catch (error) {
      report(logger, 'error', 'broker message failed', `${name}: ${message.id} given back for redelivery`, {
        source: name,
        id: message.id,
        error: errorText(error),
      });
      return settle(message.retry(), logger, name);
    }
    await settle(message.ack(), logger, name);
  };
  return new Inbox(source, async (batch) => void (await Promise.all(batch.map(one))));
}

/**
 * Why a message cannot be taken: a body its source could not read, no id, an id that is not a
 * valid key, a type that is not a valid event type (the webhooks' rules); undefined when it can.
 */
function refuse(message: BrokerMessage): string | undefined {
  if (message.refusal !== undefined) return message.refusal;
  const { id, type } = message;
  if (id === undefined || id === '') return 'the message has no id: it is rejected, never processed without a key';
  try {
    validateKey(id);
  } catch (error) {
    return `the message id is not a valid key (${(error as Error).message})`;
  }
  try {
    validateEventType(type);
  } catch (error) {
    return `the message type is not a valid event type (${(error as Error).message})`;
  }
  return undefined;
}

async function rejectMessage(
  message: BrokerMessage,
  reason: string,
  logger: OncelyLogger | undefined,
  source: string,
): Promise<void> {
  // Clipped: the type is what the sender wrote, maybe the reason it is rejected (a megabyte of it).
  const type = typeof message.type === 'string' ? message.type.slice(0, 2 * MAX_EVENT_TYPE_LENGTH) : message.type;
  report(logger, 'warn', 'broker message rejected', `${source}: ${reason}`, { source, type, reason });
  await settle(message.reject(reason), logger, source);
}

function checkSourceName(name: string): void {
  if (typeof name !== 'string' || name.length === 0 || name.includes('/'))
    throw new OncelyError('CONFIG_INVALID', 'a broker source needs a non-empty name without "/"');
}

// An ack or retry that fails (connection lost) is the broker's to redeliver: logged, not thrown.
async function settle(done: Promise<void>, logger: OncelyLogger | undefined, source: string): Promise<void> {
  try {
    await done;
  } catch (error) {
    report(logger, 'warn', 'broker acknowledgement failed', `${source}: the broker will redeliver`, {
      source,
      error: errorText(error),
    });
  }
}

function report(
  logger: OncelyLogger | undefined,
  level: 'warn' | 'error',
  message: string,
  line: string,
  fields: Record<string, unknown>,
): void {
  if (logger) logger[level](fields, message);
  else process.stderr.write(`oncely: ${message}: ${line}${fields.error ? `: ${fields.error}` : ''}\n`);
}
