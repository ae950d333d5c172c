import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { basename, extname, join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { refuseUnknownKeys } from '../core/closest.js';
import { type Duration, type Ttl, toMs } from '../core/duration.js';
import { OncelyError } from '../core/errors.js';
import { missingPackage, packageMissing } from '../core/peer.js';
import type { LeaseExpiredPolicy } from '../core/record.js';
import type { ErrorPolicy } from '../engine/options.js';
import type { Reconcile } from '../engine/reconcile.js';
import type { AnyFlow } from '../flows/define.js';
import { checkConfig, type HostConfig } from './config.js';
import type { HostContext } from './context.js';
import type { DataStore, HostEvent } from './types.js';

/** A Standard Schema (zod, valibot, arktype...): validated without depending on any of them. */
export interface InputSchema {
  '~standard': {
    validate(
      value: unknown,
    ):
      | { value: unknown; issues?: undefined }
      | { issues: readonly { message: string }[] }
      | Promise<{ value: unknown; issues?: undefined } | { issues: readonly { message: string }[] }>;
  };
}

/**
 * Where a handler's or consumer's effects land. 'database' (the default): one transaction holds
 * the claim, the writes and the outcome, all or nothing. 'external' (it calls a payment gateway, a
 * mailer): the claim is committed first, so a crash mid-call leaves it for `onLeaseExpired`.
 */
export type Effects = 'database' | 'external';

/** What a handler or consumer declares about its claim, beside its `reconcile`. */
export interface ClaimDeclarations {
  /** Where its effects land; default 'database' (README "Handlers with external effects"). */
  effects?: Effects;
  /** How long its claim holds without renewal; renewed every third of it while it runs. Default 30s. */
  lease?: Duration;
  /** effects 'external': a claim whose process died: 'retry' (default) lets the next caller take over, 'hold' turns it unknown. */
  onLeaseExpired?: LeaseExpiredPolicy;
  /** effects 'external': thrown errors to store and replay ('store' or a predicate); default none: the key is released. */
  onError?: ErrorPolicy;
}

/** The claim declarations of a module, checked: CONFIG_INVALID naming `where` for a bad one. */
export function claimDeclarations(
  module: ClaimDeclarations & { idempotency?: { lease?: Duration } },
  where: string,
): ClaimDeclarations & { external: boolean } {
  const { effects = 'database', onLeaseExpired, onError } = module;
  if (effects !== 'database' && effects !== 'external')
    throw new OncelyError('CONFIG_INVALID', `${where}: effects must be 'database' or 'external'`);
  const external = effects === 'external';
  // In one transaction nobody else ever sees the claim: a crash or a throw rolls it back with the rest.
  if (!external && (onLeaseExpired !== undefined || onError !== undefined))
    throw new OncelyError('CONFIG_INVALID', `${where}: onLeaseExpired and onError need effects: 'external'`);
  if (onLeaseExpired !== undefined && onLeaseExpired !== 'retry' && onLeaseExpired !== 'hold')
    throw new OncelyError('CONFIG_INVALID', `${where}: onLeaseExpired must be 'retry' or 'hold'`);
  if (onError !== undefined && onError !== 'release' && onError !== 'store' && typeof onError !== 'function')
    throw new OncelyError('CONFIG_INVALID', `${where}: onError must be 'release', 'store' or a function of the error`);
  const old = module.idempotency?.lease;
  if (module.lease !== undefined && old !== undefined && toMs(module.lease, 'lease') !== toMs(old, 'lease'))
    throw new OncelyError('CONFIG_INVALID', `${where}: lease and idempotency.lease differ; declare lease only`);
  const lease = module.lease ?? old;
  if (lease !== undefined) toMs(lease, `${where}: lease`);
  return { external, effects, lease, onLeaseExpired, onError };
}

/** What a file in `handlers/<group>/<name>.ts` exports. */
export interface HandlerModule extends ClaimDeclarations {
  handle(input: unknown, ctx: HostContext): unknown;
  /**
   * Whether a key is required, which input fields build it when the request sends none, and how
   * long it replays; `lease` is the former place of the module's `lease`.
   */
  idempotency?: { required?: boolean; keyFields?: readonly string[]; ttl?: Ttl; lease?: Duration };
  input?: InputSchema;
  /** A sample input: `oncely serve` and `GET /` print a ready curl line with it. */
  example?: unknown;
  /** How long `handle` may run before its transaction rolls back with 503 HANDLER_TIMEOUT. Default: the config's. */
  timeout?: Duration;
  /** Asks the downstream about an unknown or stalled record of this handler by its key (README "Reconciliation"). */
  reconcile?: Reconcile;
}

/** What a consumer's `requires` gets: read access to the data store, in the transaction the consumer would run in. */
export interface RequiresContext {
  readonly store: Pick<DataStore, 'get' | 'find'>;
}

/** How long an event waits for its consumer's prerequisite when `requiresWithin` is not declared. */
export const DEFAULT_REQUIRES_WITHIN = '1h';

/** What a file in `consumers/<source>/<type>.ts` exports. */
export interface ConsumerModule extends ClaimDeclarations {
  handle(event: HostEvent, ctx: HostContext): unknown;
  /** Ordering by business version: events older than the aggregate's stored version are `stale`. */
  ordering?: { aggregate(event: HostEvent): string; version(event: HostEvent): number };
  /** How long `handle` may run before its transaction rolls back and the attempt counts as failed. Default: the config's. */
  timeout?: Duration;
  /** Asks the downstream about an unknown or stalled record of this consumer by its key, the event id. */
  reconcile?: Reconcile;
  /** The prerequisite (e.g. "the order exists"): while it answers false the event is `waiting`, not delivered. */
  requires?(event: HostEvent, ctx: RequiresContext): boolean | Promise<boolean>;
  /** How long after its receipt an event may wait for `requires` before it is dead-lettered; default '1h'. */
  requiresWithin?: Duration;
}

/** An app folder, loaded. */
export interface App {
  dir: string;
  config: HostConfig;
  schemaSql: string;
  /** By handler id: `<group>.<name>`, e.g. `orders.create`. */
  handlers: Map<string, HandlerModule>;
  /** By `<source>/<type>`, e.g. `shop/order.paid`. */
  consumers: Map<string, ConsumerModule>;
  /** The default exports of `flows/*.ts`: flows run by this app's workers. */
  flows: AnyFlow[];
}

// Every export oncely reads of a handler or consumer: any other is a typo that would leave a default in force.
const HANDLER_EXPORTS: Record<keyof HandlerModule, true> = {
  handle: true,
  idempotency: true,
  input: true,
  example: true,
  timeout: true,
  reconcile: true,
  effects: true,
  lease: true,
  onLeaseExpired: true,
  onError: true,
};
const IDEMPOTENCY_KEYS: Record<keyof NonNullable<HandlerModule['idempotency']>, true> = {
  required: true,
  keyFields: true,
  ttl: true,
  lease: true,
};
const CONSUMER_EXPORTS: Record<keyof ConsumerModule, true> = {
  handle: true,
  ordering: true,
  timeout: true,
  reconcile: true,
  requires: true,
  requiresWithin: true,
  effects: true,
  lease: true,
  onLeaseExpired: true,
  onError: true,
};

const CODE = new Set(['.ts', '.mts', '.js', '.mjs']);
const NAME = /^[a-z0-9][a-z0-9._-]*$/i;

/** Loads `schema.sql`, `oncely.config.ts`, `handlers/*\/*` and `consumers/*\/*` of an app folder. */
export async function loadApp(folder: string): Promise<App> {
  const dir = resolve(folder);
  if (!existsSync(dir)) throw new OncelyError('CONFIG_INVALID', `app folder ${dir} does not exist`);
  const schemaPath = join(dir, 'schema.sql');
  const configPath = ['oncely.config.ts', 'oncely.config.js'].map((f) => join(dir, f)).find((f) => existsSync(f));
  const config = configPath ? configOf(await importFile<{ default?: HostConfig }>(configPath), configPath) : {};
  const handlers = new Map<string, HandlerModule>();
  for (const [group, name, file] of modules(join(dir, 'handlers'))) {
    const module = await importFile<HandlerModule>(file);
    if (typeof module.handle !== 'function')
      throw new OncelyError('CONFIG_INVALID', `${file} must export handle(input, ctx)`);
    refuseUnknownKeys(module, Object.keys(HANDLER_EXPORTS), file);
    if (typeof module.idempotency === 'object' && module.idempotency !== null)
      refuseUnknownKeys(module.idempotency, Object.keys(IDEMPOTENCY_KEYS), file, 'idempotency.');
    checkReconcile(module, file);
    claimDeclarations(module, file);
    handlers.set(`${group}.${name}`, module);
  }
  const consumers = new Map<string, ConsumerModule>();
  for (const [source, type, file] of modules(join(dir, 'consumers'))) {
    const module = await importFile<ConsumerModule>(file);
    if (typeof module.handle !== 'function')
      throw new OncelyError('CONFIG_INVALID', `${file} must export handle(event, ctx)`);
    refuseUnknownKeys(module, Object.keys(CONSUMER_EXPORTS), file);
    checkReconcile(module, file);
    claimDeclarations(module, file);
    requiresWithinMs(module, file);
    consumers.set(`${source}/${type}`, module);
  }
  const flows: AnyFlow[] = [];
  const flowDir = join(dir, 'flows');
  if (existsSync(flowDir))
    for (const file of readdirSync(flowDir).sort()) {
      if (!CODE.has(extname(file)) || file.endsWith('.d.ts') || file.includes('.test.')) continue;
      const flow = (await importFile<{ default?: AnyFlow }>(join(flowDir, file))).default;
      if (flow?.kind !== 'oncely-flow')
        throw new OncelyError('CONFIG_INVALID', `${join(flowDir, file)} must export default defineFlow(...)`);
      flows.push(flow);
    }
  return {
    dir,
    flows,
    config,
    schemaSql: existsSync(schemaPath) ? readFileSync(schemaPath, 'utf8') : '',
    handlers,
    consumers,
  };
}

/** A module of the app; a package it imports that is not installed is PACKAGE_MISSING naming the file and the install line. */
async function importFile<T>(file: string): Promise<T> {
  try {
    return (await import(pathToFileURL(file).href)) as T;
  } catch (error) {
    const name = missingPackage(error);
    if (name !== undefined) throw packageMissing(file, [name], error);
    throw error;
  }
}

/** The config a config file exports by default, its keys checked (README "Configuration"). */
function configOf(module: { default?: HostConfig }, file: string): HostConfig {
  const config = module.default;
  if (typeof config !== 'object' || config === null || Array.isArray(config))
    throw new OncelyError('CONFIG_INVALID', `${file} must export default defineConfig({ ... })`);
  checkConfig(config, file);
  return config;
}

/** A `reconcile` export must be the function of a record: anything else fails at load, not at the first pass. */
function checkReconcile(module: { reconcile?: unknown }, file: string): void {
  if (module.reconcile !== undefined && typeof module.reconcile !== 'function')
    throw new OncelyError('CONFIG_INVALID', `${file}: reconcile must be a function of the record, reconcile(record)`);
}

/**
 * How long a consumer's events wait for its prerequisite, in ms; a `requires` that is not a function,
 * a `requiresWithin` without one, or one that is not a positive duration is CONFIG_INVALID.
 */
export function requiresWithinMs(module: Pick<ConsumerModule, 'requires' | 'requiresWithin'>, where: string): number {
  if (module.requires !== undefined && typeof module.requires !== 'function')
    throw new OncelyError('CONFIG_INVALID', `${where}: requires must be a function, requires(event, ctx)`);
  if (module.requiresWithin !== undefined && module.requires === undefined)
    throw new OncelyError('CONFIG_INVALID', `${where}: requiresWithin needs a requires(event, ctx) to wait for`);
  let ms: number;
  try {
    ms = toMs(module.requiresWithin ?? DEFAULT_REQUIRES_WITHIN, 'requiresWithin');
  } catch (error) {
    throw new OncelyError('CONFIG_INVALID', `${where}: ${(error as Error).message}`, { cause: error });
  }
  if (ms <= 0) throw new OncelyError('CONFIG_INVALID', `${where}: requiresWithin must be longer than 0`);
  return ms;
}

/** [folder, name without extension, path] of the code files one level below `root`. */
function modules(root: string): [string, string, string][] {
  if (!existsSync(root)) return [];
  const found: [string, string, string][] = [];
  for (const folder of readdirSync(root, { withFileTypes: true })) {
    if (!folder.isDirectory() || !NAME.test(folder.name)) continue;
    for (const file of readdirSync(join(root, folder.name), { withFileTypes: true })) {
      const extension = extname(file.name);
      if (!file.isFile() || !CODE.has(extension) || file.name.endsWith('.d.ts') || file.name.includes('.test.'))
        continue;
      const name = basename(file.name, extension);
      if (NAME.test(name)) found.push([folder.name, name, join(root, folder.name, file.name)]);
    }
  }
  return found.sort((a, b) => a[2].localeCompare(b[2]));
}
