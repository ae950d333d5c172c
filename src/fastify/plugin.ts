import { Transform } from 'node:stream';
import type { FastifyInstance, FastifyReply, FastifyRequest, HookHandlerDoneFunction, RequestPayload } from 'fastify';
import { OncelyError } from '../core/errors.js';
import { type Execution, IdempotencyGate, type IdempotencyOptions, type RequestFacts } from '../http/gate.js';
import { type HttpResponse, normalizeHeaders } from '../http/response.js';

/** Options of the Fastify plugin, shared by every oncely HTTP adapter, e.g. `{ once, tenant: (req) => req.user.id, wait: '5s' }`. */
export type FastifyIdempotencyOptions = IdempotencyOptions<FastifyRequest>;

/** One claimed request, from its preHandler until its record is written (or its key released). */
interface Claim {
  run: Execution;
  settled: boolean;
}

const EMPTY = new Uint8Array(0);

/**
 * Idempotency-Key plugin for Fastify: a covered request with a key runs its handler once; every
 * duplicate gets the stored status, headers and body with `Idempotent-Replayed: true`. It applies to
 * the routes of the scope it is registered in; register it before plugins whose onSend hooks
 * rewrite bodies (compression), so the stored body is the handler's own.
 * @example await app.register(idempotency, { once, tenant: (req) => req.headers['x-account'] as string })
 */
export async function idempotency(fastify: FastifyInstance, options: FastifyIdempotencyOptions): Promise<void> {
  const gate = new IdempotencyGate<FastifyRequest>(options);
  // Per plugin instance, so two registrations in sibling scopes never see each other's claims.
  const claims = new WeakMap<FastifyRequest, Claim>();
  const orphans = new Set<Claim>();

  const settle = (claim: Claim): boolean => {
    if (claim.settled) return false;
    claim.settled = true;
    orphans.delete(claim);
    return true;
  };

  const track = (request: FastifyRequest, reply: FastifyReply, run: Execution) => {
    const claim: Claim = { run, settled: false };
    claims.set(request, claim);
    const closed = () => {
      if (claim.settled) return;
      if (reply.sent) {
        // Hijacked or written straight to reply.raw: the handler answered past onSend, so nothing was captured.
        if (settle(claim)) void run.finish({ status: reply.statusCode, headers: {}, body: EMPTY }, false);
        return;
      }
      // The client left while the handler runs. Fastify still sends (and runs onSend for) what the
      // handler returns or throws, which is stored: the client's retry then gets the response it
      // missed instead of a second execution. Only a handler that never answers releases the key.
      orphans.add(claim);
      run.clientLeft();
    };
    // `on`, not `once`: a response closes once, and once() wraps the listener in a closure of its own.
    if (reply.raw.destroyed) closed();
    else reply.raw.on('close', closed);
  };

  // Fastify reads bodies up to its own bodyLimit; maxBodyBytes must hold before that too, even
  // when bodyLimit is larger. A declared Content-Length over it is answered before a byte is read;
  // a chunked body is cut at it. Requests with neither carry no body and are left as they are.
  fastify.addHook(
    'preParsing',
    (
      request: FastifyRequest,
      reply: FastifyReply,
      payload: RequestPayload,
      done: (error: Error | null, payload?: RequestPayload) => void,
    ) => {
      if (!gate.covers(request.method) || request.is404) return done(null, payload);
      const declared = request.headers['content-length'];
      if (declared !== undefined) {
        if (Number(declared) > gate.maxBodyBytes) return send(reply, gate.tooLarge(request.headers));
        return done(null, payload);
      }
      if (request.headers['transfer-encoding'] === undefined) return done(null, payload);
      done(null, payload.pipe(cappedAt(gate.maxBodyBytes)));
    },
  );

  // Callback-style hooks: a request the plugin does not cover costs a Set and a WeakMap lookup, no promise.
  fastify.addHook('preHandler', (request: FastifyRequest, reply: FastifyReply, done: HookHandlerDoneFunction) => {
    // A 404 has no route to scope a key by, and must stay a 404.
    if (!gate.covers(request.method) || request.is404) return done();
    gate.begin(request, factsOf(request)).then(
      (start) => {
        if (start.kind === 'pass') return done();
        if (start.kind === 'respond') return send(reply, start.response);
        track(request, reply, start.run);
        start.run.within(done);
      },
      (error: Error) => done(error),
    );
  });

  fastify.addHook(
    'onSend',
    (
      request: FastifyRequest,
      reply: FastifyReply,
      payload: unknown,
      done: (error: Error | null, payload?: unknown) => void,
    ) => {
      const claim = claims.get(request);
      if (claim === undefined || !settle(claim)) return done(null, payload);
      claims.delete(request);
      const body = bytesOf(payload, gate.maxBodyBytes);
      const complete = body !== undefined && !isEventStream(reply);
      const captured = {
        status: reply.statusCode,
        headers: normalizeHeaders(reply.getHeaders()),
        body: complete ? body : EMPTY,
      };
      // Awaited, so the record is written before the response leaves: a retry can only ever see it.
      claim.run.finish(captured, complete).then(
        (sent) => {
          for (const [name, value] of Object.entries(sent.headers))
            if (!reply.hasHeader(name)) reply.header(name, value);
          done(null, payload);
        },
        // The gate answers every failure itself; should it ever throw, the client still gets its response.
        () => done(null, payload),
      );
    },
  );

  // On shutdown nobody is left to wait for an orphan's handler: release its key now, not after the lease.
  fastify.addHook('onClose', async () => {
    await Promise.all([...orphans].map((claim) => settle(claim) && claim.run.abandon(new Error('server closed'))));
  });
}

// Like fastify-plugin, without the dependency: the hooks apply to the scope the plugin is registered in.
Object.assign(idempotency, {
  [Symbol.for('skip-override')]: true,
  [Symbol.for('fastify.display-name')]: 'oncely-idempotency',
});

function factsOf(request: FastifyRequest): RequestFacts {
  const length = request.headers['content-length'];
  return {
    method: request.method,
    route: request.routeOptions.url ?? request.url,
    target: request.url,
    header: request.headers['idempotency-key'],
    body: request.body,
    bodyBytes: length === undefined ? undefined : Number(length),
    headers: request.headers,
  };
}

/** Sends a replay or a problem as stored: bytes, which Fastify neither serializes nor retypes. */
function send(reply: FastifyReply, response: HttpResponse): void {
  reply.code(response.status).headers(response.headers);
  // An empty body without a type stays without one (Fastify would call bytes application/octet-stream).
  if (response.body.byteLength === 0 && response.headers['content-type'] === undefined) reply.send();
  // Fastify makes a Buffer of any other Uint8Array itself.
  else reply.send(response.body);
}

/**
 * Passes a chunked body through until it is over `limit`, then fails the parse with a 413 (Fastify's
 * error handler answers it, as it answers its own bodyLimit): nothing past the limit is buffered.
 */
function cappedAt(limit: number): Transform {
  let size = 0;
  return new Transform({
    transform(chunk: Buffer, _encoding, callback) {
      size += chunk.length;
      if (size <= limit) return callback(null, chunk);
      const error = new OncelyError('REQUEST_TOO_LARGE', `request body is over ${limit} bytes`);
      callback(Object.assign(error, { statusCode: 413 }));
    },
  });
}

/** The bytes of a serialized payload; undefined for a stream (whose end is not ours to wait for) or a body over `limit`. */
function bytesOf(payload: unknown, limit: number): Uint8Array | undefined {
  if (payload === undefined || payload === null) return EMPTY;
  if (payload instanceof Uint8Array) return payload.byteLength > limit ? undefined : payload;
  if (typeof payload !== 'string') return undefined;
  // UTF-8 never takes fewer bytes than UTF-16 code units, so a long string is over without copying it.
  if (payload.length > limit) return undefined;
  const bytes = Buffer.from(payload);
  return bytes.byteLength > limit ? undefined : bytes;
}

function isEventStream(reply: FastifyReply): boolean {
  const type = reply.getHeader('content-type');
  return typeof type === 'string' && type.toLowerCase().startsWith('text/event-stream');
}
