/**
 * Broker sources and targets as `oncely.config.ts` declares them, and the one factory from a
 * config to a source or target. Each broker's module is imported only when a config of its kind
 * is built, so an app without amqplib or the NATS client never loads them.
 */
import { OncelyError } from '../core/errors.js';
import type { OncelyLogger } from '../core/observer.js';
import type { NatsSourceOptions, NatsTargetOptions } from './nats.js';
import type { RabbitSourceOptions, RabbitTargetOptions } from './rabbitmq.js';
import type { RedisStreamsSourceOptions, RedisStreamsTargetOptions } from './redis-streams.js';
import type { BrokerSource, BrokerTarget } from './types.js';

/** A JetStream durable consumer as a source (see `natsSource`). */
export interface NatsSourceConfig extends Omit<NatsSourceOptions, 'name' | 'logger'> {
  kind: 'nats';
}

/** A RabbitMQ queue as a source (see `rabbitmqSource`). */
export interface RabbitSourceConfig extends Omit<RabbitSourceOptions, 'name' | 'logger'> {
  kind: 'rabbitmq';
}

/** A Redis Streams consumer group as a source (see `redisStreamsSource`). */
export interface RedisStreamsSourceConfig extends Omit<RedisStreamsSourceOptions, 'name' | 'logger'> {
  kind: 'redis-streams';
}

/** A broker source in `oncely.config.ts`; its name (the key in `brokers`) is the event source name. */
export type BrokerSourceConfig = NatsSourceConfig | RabbitSourceConfig | RedisStreamsSourceConfig;

/** A JetStream stream as an outbox target (see `natsTarget`). */
export interface NatsTargetConfig extends Omit<NatsTargetOptions, 'logger'> {
  kind: 'nats';
}

/** A RabbitMQ exchange as an outbox target (see `rabbitmqTarget`). */
export interface RabbitTargetConfig extends Omit<RabbitTargetOptions, 'logger'> {
  kind: 'rabbitmq';
}

/** A Redis stream as an outbox target (see `redisStreamsTarget`). */
export interface RedisStreamsTargetConfig extends Omit<RedisStreamsTargetOptions, 'logger'> {
  kind: 'redis-streams';
}

/** A broker outbox target in `oncely.config.ts`, named by the key in `targets`. */
export type BrokerTargetConfig = NatsTargetConfig | RabbitTargetConfig | RedisStreamsTargetConfig;

/** Builds the source `name` of a config; loads only the module of its kind. */
export async function createSource(
  name: string,
  config: BrokerSourceConfig,
  logger?: OncelyLogger,
): Promise<BrokerSource> {
  switch (config.kind) {
    case 'nats': {
      const { natsSource } = await import('./nats.js');
      return natsSource({ ...config, name, logger });
    }
    case 'rabbitmq': {
      const { rabbitmqSource } = await import('./rabbitmq.js');
      return rabbitmqSource({ ...config, name, logger });
    }
    case 'redis-streams': {
      const { redisStreamsSource } = await import('./redis-streams.js');
      return redisStreamsSource({ ...config, name, logger });
    }
    default:
      throw new OncelyError(
        'CONFIG_INVALID',
        `broker source ${name}: unknown kind ${String((config as { kind: unknown }).kind)}`,
      );
  }
}

/** Builds the target `name` of a config; loads only the module of its kind. */
export async function createTarget(
  name: string,
  config: BrokerTargetConfig,
  logger?: OncelyLogger,
): Promise<BrokerTarget> {
  switch (config.kind) {
    case 'nats': {
      const { natsTarget } = await import('./nats.js');
      return natsTarget({ ...config, logger });
    }
    case 'rabbitmq': {
      const { rabbitmqTarget } = await import('./rabbitmq.js');
      return rabbitmqTarget({ ...config, logger });
    }
    case 'redis-streams': {
      const { redisStreamsTarget } = await import('./redis-streams.js');
      return redisStreamsTarget({ ...config, logger });
    }
    default:
      throw new OncelyError(
        'CONFIG_INVALID',
        `broker target ${name}: unknown kind ${String((config as { kind: unknown }).kind)}`,
      );
  }
}
