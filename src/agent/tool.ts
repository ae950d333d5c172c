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

/** What a tool's `execute` gets: the key to pass downstream, and ids for the call. */
export interface ToolContext {
  /** `<tool name>:<key fields>`; pass it to the mailer, the payment gateway... so they dedupe too. */
  readonly idempotencyKey: string;
  /** A UUID for this intent, the same on every retry: the reservation and approval refer to it. */
  readonly actionId: string;
  readonly tenant: string;
  readonly traceId: string;
  readonly requestId: string;
  /** 1 on the first execution, more after a takeover of a crashed one. */
  readonly attempt: number;
}

/** The declaration of a tool with side effects. */
export interface ToolDeclaration<I, O> {
  name: string;
  description: string;
  input: ToolSchema<I>;
  idempotency: {
    /** Fields of the input that name the intent; the key is the tool name and their values. */
    keyFields: readonly (keyof I & string)[];
    /** Fields that must match on a duplicate. Default: the key fields (a rephrased body gets the first result). */
    fingerprintFields?: readonly (keyof I & string)[];
    /** How long a result answers duplicates. */
    ttl: Ttl;
    /** Default true: a call whose key fields are missing is refused with KEY_REQUIRED. */
    required?: boolean;
  };
  /** An outbound message: what a person sees before it goes, and whether they must approve it. */
  outbound?: { preview: (input: I) => unknown; approval?: 'required' | 'none'; approvalTtl?: Duration };
  /** Credits reserved before executing, confirmed on success, released on failure. */
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

/** A declared tool. */
export type Tool<I = unknown, O = unknown> = Readonly<ToolDeclaration<I, O>> & { readonly kind: 'oncely-tool' };

/** A tool of any input and output, for collections of tools. */
// biome-ignore lint/suspicious/noExplicitAny: a registry holds tools of every input type; each call validates its input at run time.
export type AnyTool = Tool<any, any>;

const NAME = /^[A-Za-z][A-Za-z0-9_.-]{0,63}$/;

/**
 * Declares a tool a model may call any number of times: its key comes from business fields of the
 * input, so a duplicate, a retry or a parallel call of the same intent executes once.
 * @example defineTool({ name: 'sendReviewNotice', input: z.object({...}), idempotency: { keyFields: ['taskId'], ttl: 'permanent' }, execute })
 */
export function defineTool<I, O>(declaration: ToolDeclaration<I, O>): Tool<I, O> {
  if (!NAME.test(declaration.name))
    throw new InvalidArgumentError(`tool name ${JSON.stringify(declaration.name)} must match ${NAME}`);
  if (!declaration.idempotency?.keyFields?.length)
    throw new InvalidArgumentError(`tool ${declaration.name} must declare idempotency.keyFields`);
  if (typeof declaration.input?.['~standard']?.validate !== 'function')
    throw new InvalidArgumentError(
      `tool ${declaration.name} needs an input schema (zod, valibot, arktype or any Standard Schema)`,
    );
  // An approval is consumed by the one execution it approved: a record that expired would let the
  // same approval send again with nobody approving it.
  if (declaration.outbound?.approval === 'required' && declaration.idempotency.ttl !== 'permanent')
    throw new InvalidArgumentError(
      `tool ${declaration.name} needs approval, so its records must be permanent (idempotency.ttl: 'permanent')`,
    );
  if (declaration.reconcile !== undefined && typeof declaration.reconcile !== 'function')
    throw new InvalidArgumentError(`tool ${declaration.name}: reconcile must be a function of the record`);
  if (declaration.cost && (!Number.isInteger(declaration.cost.credits) || declaration.cost.credits <= 0))
    throw new InvalidArgumentError(`tool ${declaration.name}: cost.credits must be a positive integer`);
  return Object.freeze({ ...declaration, kind: 'oncely-tool' as const });
}

/** Whether a tool changes the world, for adapters' hints. */
export function isDestructive(tool: AnyTool): boolean {
  return tool.destructive ?? Boolean(tool.outbound || tool.cost);
}
