export { enqueue, type OutboxMessage, OutboxRelay, type RelayOptions } from '../host/outbox.js';
export {
  type BrokerSourceConfig,
  type BrokerTargetConfig,
  createSource,
  createTarget,
  type NatsSourceConfig,
  type NatsTargetConfig,
  type RabbitSourceConfig,
  type RabbitTargetConfig,
  type RedisStreamsSourceConfig,
  type RedisStreamsTargetConfig,
} from './config.js';
export {
  type BatchOutcome,
  type EventIntake,
  eventInbox,
  Inbox,
  type InboxOptions,
  intakeBatch,
  type OnceInboxOptions,
  onceInbox,
} from './inbox.js';
export {
  type NatsIdFrom,
  type NatsSourceOptions,
  type NatsTargetOptions,
  type NatsTypeFrom,
  natsSource,
  natsTarget,
} from './nats.js';
export { brokerRelay } from './outbox.js';
export {
  type RabbitIdFrom,
  type RabbitQueueDeclaration,
  type RabbitSourceOptions,
  type RabbitTargetOptions,
  type RabbitTypeFrom,
  rabbitmqSource,
  rabbitmqTarget,
} from './rabbitmq.js';
export {
  type RedisStreamsSourceOptions,
  type RedisStreamsTargetOptions,
  redisStreamsSource,
  redisStreamsTarget,
  type StreamFields,
} from './redis-streams.js';
export type { BrokerMessage, BrokerSource, BrokerTarget, SourceState, SourceStatus } from './types.js';
