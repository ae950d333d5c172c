import type { Context } from 'hono';
import { OncelyError } from '../core/errors.js';
import { keyFrom } from '../core/key.js';
import type { Db } from '../db/types.js';
import type { Flows } from '../flows/flows.js';
import type { IdempotencyGate } from '../http/gate.js';
import type { HttpResponse } from '../http/response.js';
import type { HandlerModule } from './app.js';
import { hostContext } from './context.js';
import { createDataStore } from './data-store.js';
import type { AppSchema } from './schema.js';

/** The reply of `POST /v1/invoke/:handler`: `{ code: 0, data }` or `{ code, error: { code, message } }`. */
export function envelope(
  status: number,
  body: { data: unknown } | { error: { code: string; message: string } },
): HttpResponse {
  const text = JSON.stringify(
    'data' in body ? { code: 0, data: body.data ?? null } : { code: status, error: body.error },
  );
  return { status, headers: { 'content-type': 'application/json' }, body: Buffer.from(text) };
}

/** Everything an invocation needs from the host. */
export interface InvokeDeps {
  db: Db;
  schema: () => AppSchema;
  gates: Map<string, IdempotencyGate<Context>>;
  tenantOf(c: Context): string;
  flows: Flows | undefined;
  afterCommit(): void;
}

/**
 * Runs one handler invocation in one transaction: the idempotency record, the handler's store
 * writes and its outbox rows commit together, or none of them does.
 */
export async function invoke(c: Context, id: string, handler: HandlerModule, deps: InvokeDeps): Promise<HttpResponse> {
  const text = await c.req.text();
  let input: unknown = {};
  try {
    if (text !== '') input = JSON.parse(text);
  } catch {
    return envelope(400, { error: { code: 'BODY_INVALID', message: 'the body must be JSON' } });
  }
  if (handler.input) {
    const checked = await handler.input['~standard'].validate(input);
    if (checked.issues)
      return envelope(400, {
        error: { code: 'INPUT_INVALID', message: checked.issues.map((i) => i.message).join('; ') },
      });
    input = checked.value;
  }
  const declared = handler.idempotency ?? {};
  const header = c.req.header('idempotency-key');
  let key: string | undefined;
  try {
    // A key built from business fields of the input when the caller sent none: never a random one.
    if (header === undefined && declared.keyFields?.length)
      key = keyFrom(...declared.keyFields.map((f) => fieldOf(input, f)));
  } catch (error) {
    return envelope(400, { error: { code: (error as OncelyError).code, message: (error as Error).message } });
  }
  const gate = deps.gates.get(id);
  if (!gate) return envelope(404, { error: { code: 'HANDLER_UNKNOWN', message: `no handler ${id}` } });
  const tenant = deps.tenantOf(c);
  try {
    const response = await deps.db.transaction(async (tx) => {
      const start = await gate.begin(
        c,
        { method: 'POST', route: id, header, key, body: input, bodyBytes: Buffer.byteLength(text) },
        { tx: tx.handle },
      );
      if (start.kind === 'respond') return asEnvelope(start.response);
      const store = createDataStore(tx, deps.schema());
      if (start.kind === 'pass')
        return envelope(200, {
          data: await handler.handle(input, hostContext(tx, store, undefined, tenant, deps.flows)),
        });
      let data: unknown;
      try {
        data = await handler.handle(input, hostContext(tx, store, start.run.context, tenant, deps.flows));
      } catch (error) {
        await start.run.abandon(error);
        throw error;
      }
      return start.run.finish(envelope(200, { data }), true);
    });
    deps.afterCommit();
    return response;
  } catch (error) {
    // The handler threw: its transaction (record included) rolled back, so the key is free again.
    const e = error as { status?: unknown; code?: unknown; message?: unknown };
    const status = typeof e.status === 'number' && e.status >= 400 && e.status < 600 ? e.status : 500;
    const code = typeof e.code === 'string' ? e.code : 'HANDLER_FAILED';
    return envelope(status, { error: { code, message: typeof e.message === 'string' ? e.message : 'handler failed' } });
  }
}

function fieldOf(input: unknown, field: string): string | number {
  const value = (input as Record<string, unknown> | null)?.[field];
  if (typeof value === 'string' || typeof value === 'number') return value;
  throw new OncelyError('KEY_REQUIRED', `key field ${field} is missing from the input`);
}

/** Problem documents of the gate, in the host's envelope (status and Retry-After kept). */
function asEnvelope(response: HttpResponse): HttpResponse {
  const type = response.headers['content-type'];
  if (typeof type !== 'string' || !type.startsWith('application/problem+json')) return response;
  const problem = JSON.parse(Buffer.from(response.body).toString()) as { code: string; detail: string };
  const wrapped = envelope(response.status, { error: { code: problem.code, message: problem.detail } });
  const retry = response.headers['retry-after'];
  if (retry !== undefined) wrapped.headers['retry-after'] = retry;
  return wrapped;
}
