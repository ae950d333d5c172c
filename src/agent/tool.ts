import type { Duration, Ttl } from '../core/duration.js';
import { InvalidArgumentError } from '../core/errors.js';
import type { Reconcile } from '../engine/reconcile.js';

/** A Standard Schema (zod 3.24+/4, valibot, arktype): validated without depending on any of them. */
export interface ToolSchema<I> {
  '~standard': {
    validate(
      value: unknown,
    ):
      | { value: I; issues?: undefined }
      | { issues: readonly { message: string; path?: readonly unknown[] }[] }
      | Promise<
          { value: I; issues?: undefined } | { issues: readonly { message: string; path?: readonly unknown[] }[] }
        >;
  };
}

/** What a read-only tool's `execute` gets: the ids of the call. */
export interface ReadContext {
  readonly tenant: string;
  /** The caller's trace id (CallOptions `traceId`), or a new one. */
  readonly traceId: string;
  readonly requestId: string;
}

/** What a tool's `execute` gets: the key to pass downstream, and ids for the call. */
export interface ToolContext extends ReadContext {
  /** `<tool name>:<key fields>`; pass it to the mailer, the payment gateway... so they dedupe too. */
  readonly idempotencyKey: string;
  /** A UUID for this action, the same on every retry: the reservation, its charge and the approval refer to it. */
  readonly actionId: string;
  /** 1 on the first execution, more after a takeover of a crashed one. */
  readonly attempt: number;
}

/** The declaration of a tool with side effects. */
export interface ToolDeclaration<I, O> {
  name: string;
  description: string;
  input: ToolSchema<I>;
  readOnly?: false;
  /**
   * How calls of one intent are told apart. Every call needs its key fields (KEY_REQUIRED
   * otherwise): a tool with effects never runs unkeyed; a tool without effects is `readOnly`.
   */
  idempotency: {
    /** Fields of the input that name the intent; the key is the tool name and their values. */
    keyFields: readonly (keyof I & string)[];
    /** Fields that must match on a duplicate. Default: the key fields (a rephrased body gets the first result). */
    fingerprintFields?: readonly (keyof I & string)[];
    /** How long a result answers duplicates. */
    ttl: Ttl;
    /**
     * With a `cost` and a finite `ttl`: the fingerprint fields, beyond the key fields, that make a
     * run after the record expired a new action (a new charge), e.g. a run id or a date. The same
     * values again are the same action: it was charged, so it is not run nor charged again.
     */
    actionFields?: readonly (keyof I & string)[];
  };
  /** An outbound message: what a person sees before it goes, and whether they must approve it. */
  outbound?: { preview: (input: I) => unknown; approval?: 'required' | 'none'; approvalTtl?: Duration };
  /** Credits reserved before executing, charged once per action on success, released on failure. */
  cost?: { credits: number; account: (ctx: { tenant: string }) => string };
  /** Marks the tool as changing the world (MCP's destructiveHint). Default: true when it has an outbound message or a cost. */
  destructive?: boolean;
  execute(input: I, ctx: ToolContext): Promise<O> | O;
  /**
   * Asks the downstream (the mailer, the gateway) by the record's key, the `idempotencyKey` the
   * tool gave it, whether a call whose outcome is unknown was sent (README "Reconciliation").
   */
  reconcile?: Reconcile;
}

/**
 * The declaration of a tool that changes nothing (a lookup, a search): no key fields, no record,
 * no reservation; every call runs. Announced as read-only to the model (MCP `readOnlyHint`).
 */
export interface ReadToolDeclaration<I, O> {
  name: string;
  description: string;
  input: ToolSchema<I>;
  readOnly: true;
  idempotency?: never;
  outbound?: never;
  cost?: never;
  destructive?: false;
  reconcile?: never;
  execute(input: I, ctx: ReadContext): Promise<O> | O;
}

/** A declared tool. */
export type Tool<I = unknown, O = unknown> = Readonly<ToolDeclaration<I, O> | ReadToolDeclaration<I, O>> & {
  readonly kind: 'oncely-tool';
};

/** A tool of any input and output, for collections of tools. */
// biome-ignore lint/suspicious/noExplicitAny: a registry holds tools of every input type; each call validates its input at run time.
export type AnyTool = Tool<any, any>;

/** A tool with side effects, as the runtime narrows it. */
// biome-ignore lint/suspicious/noExplicitAny: as AnyTool.
export type EffectTool = Readonly<ToolDeclaration<any, any>> & { readonly kind: 'oncely-tool' };

/** A read-only tool, as the runtime narrows it. */
// biome-ignore lint/suspicious/noExplicitAny: as AnyTool.
export type ReadTool = Readonly<ReadToolDeclaration<any, any>> & { readonly kind: 'oncely-tool' };

const NAME = /^[A-Za-z][A-Za-z0-9_.-]{0,63}$/;

/**
 * Declares a tool a model may call any number of times: its key comes from business fields of the
 * input, so a duplicate, a retry or a parallel call of the same intent executes once.
 * @example defineTool({ name: 'sendReviewNotice', input: z.object({...}), idempotency: { keyFields: ['taskId'], ttl: 'permanent' }, execute })
 */
export function defineTool<I, O>(declaration: ReadToolDeclaration<I, O>): Tool<I, O>;
export function defineTool<I, O>(declaration: ToolDeclaration<I, O>): Tool<I, O>;
export function defineTool<I, O>(declaration: ToolDeclaration<I, O> | ReadToolDeclaration<I, O>): Tool<I, O>;
export function defineTool<I, O>(declaration: ToolDeclaration<I, O> | ReadToolDeclaration<I, O>): Tool<I, O> {
  if (!NAME.test(declaration.name))
    throw new InvalidArgumentError(`tool name ${JSON.stringify(declaration.name)} must match ${NAME}`);
  if (typeof declaration.input?.['~standard']?.validate !== 'function')
    throw new InvalidArgumentError(
      `tool ${declaration.name} needs an input schema (zod, valibot, arktype or any Standard Schema)`,
    );
  if (declaration.readOnly === true) checkReadOnly(declaration);
  else checkEffects(declaration as ToolDeclaration<I, O>);
  return Object.freeze({ ...declaration, kind: 'oncely-tool' as const }) as Tool<I, O>;
}

/** A read-only tool declares nothing that belongs to effects. */
function checkReadOnly(declaration: ReadToolDeclaration<unknown, unknown>): void {
  const effects = (['idempotency', 'outbound', 'cost', 'reconcile'] as const).filter(
    (field) => declaration[field] !== undefined,
  );
  if (declaration.destructive === (true as never)) effects.push('destructive' as never);
  if (effects.length)
    throw new InvalidArgumentError(
      `tool ${declaration.name} is readOnly: it changes nothing, so it declares no ${effects.join(', ')}`,
    );
}

function checkEffects<I, O>(declaration: ToolDeclaration<I, O>): void {
  const { name, idempotency } = declaration;
  if (!idempotency?.keyFields?.length)
    throw new InvalidArgumentError(`tool ${name} must declare idempotency.keyFields (or be readOnly: true)`);
  // The option existed and was ignored; an unkeyed run of a tool with effects is the duplicate oncely stops.
  if ((idempotency as { required?: unknown }).required === false)
    throw new InvalidArgumentError(
      `tool ${name}: idempotency.required is gone; a tool with effects always needs its key fields, a tool without is readOnly: true`,
    );
  // An approval is consumed by the one execution it approved: a record that expired would let the
  // same approval send again with nobody approving it.
  if (declaration.outbound?.approval === 'required' && idempotency.ttl !== 'permanent')
    throw new InvalidArgumentError(
      `tool ${name} needs approval, so its records must be permanent (idempotency.ttl: 'permanent')`,
    );
  if (declaration.reconcile !== undefined && typeof declaration.reconcile !== 'function')
    throw new InvalidArgumentError(`tool ${name}: reconcile must be a function of the record`);
  if (declaration.cost && (!Number.isInteger(declaration.cost.credits) || declaration.cost.credits <= 0))
    throw new InvalidArgumentError(`tool ${name}: cost.credits must be a positive integer`);
  checkActionFields(declaration);
}

/**
 * One action is charged once, ever. A finite TTL lets the same key run again after its record
 * expired; unless fields beyond the key tell that run apart, it is the same action, charged
 * already, and never runs again: the TTL would mean nothing. So a cost with a finite TTL needs them.
 */
function checkActionFields<I, O>(declaration: ToolDeclaration<I, O>): void {
  const { name, idempotency } = declaration;
  const fields = idempotency.actionFields;
  if (fields === undefined) {
    if (declaration.cost && idempotency.ttl !== 'permanent')
      throw new InvalidArgumentError(
        `tool ${name} has a cost and a finite ttl: after its record expires the same key would reuse its actionId, which is charged once ever; declare idempotency.actionFields (what makes a new run a new action) or make the ttl permanent`,
      );
    return;
  }
  const fingerprint: readonly string[] = idempotency.fingerprintFields ?? idempotency.keyFields;
  const keys: readonly string[] = idempotency.keyFields;
  if (!fields.length || fields.some((f) => !fingerprint.includes(f) || keys.includes(f)))
    throw new InvalidArgumentError(
      `tool ${name}: idempotency.actionFields must be fingerprint fields that are not key fields (a duplicate within the ttl must carry the same ones)`,
    );
}

/** Whether a tool changes the world, for adapters' hints. */
export function isDestructive(tool: AnyTool): boolean {
  if (tool.readOnly) return false;
  return tool.destructive ?? Boolean(tool.outbound || tool.cost);
}
