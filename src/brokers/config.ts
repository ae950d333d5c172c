/**
 * Broker sources and targets as `oncely.config.ts` declares them, and the one factory from a
 * config to a source or target. Each broker's module is imported only when a config of its kind
 * is built, so an app without amqplib or the NATS client never loads them.
 */
import { OncelyError } from '../core/errors.js';
import type { OncelyLogger } from '../core/observer.js';
import type { NatsSourceOptions, NatsTargetOptions } from './nats.js';
import type { BrokerSource, BrokerTarget } from './types.js';

/** A JetStream durable consumer as a source (see `natsSource`). */
export interface NatsSourceConfig extends Omit<NatsSourceOptions, 'name' | 'logger'> {
  kind: 'nats';
}

/** A broker source in `oncely.config.ts`; its name (the key in `brokers`) is the event source name. */
export type BrokerSourceConfig = NatsSourceConfig;

/** A JetStream stream as an outbox target (see `natsTarget`). */
export interface NatsTargetConfig extends Omit<NatsTargetOptions, 'logger'> {
  kind: 'nats';
}

/** A broker outbox target in `oncely.config.ts`, named by the key in `targets`. */
export type BrokerTargetConfig = NatsTargetConfig;

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
    default:
      throw new OncelyError(
        'CONFIG_INVALID',
        `broker target ${name}: unknown kind ${String((config as { kind: unknown }).kind)}`,
      );
  }
}
