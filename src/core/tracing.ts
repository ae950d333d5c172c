/**
 * OpenTelemetry through `@opentelemetry/api` only (an optional peer): oncely starts spans on the
 * application's own tracer provider and continues the caller's W3C trace. Without the API
 * installed, or with no provider registered, no span is made and nothing is paid but one check.
 */
import type * as Api from '@opentelemetry/api';

export type Tracer = Api.Tracer;
export type Span = Api.Span;
export type Context = Api.Context;
export type Attributes = Api.Attributes;

const TRACER_NAME = 'oncely';

let api: typeof Api | null | undefined;
// Loaded once, at import: the engine's first call finds it ready (createOncely awaits it).
const loading: Promise<void> = import('@opentelemetry/api').then(
  (module) => {
    api = module;
  },
  () => {
    api = null;
  },
);

/** Resolves once the optional API has been looked for; `createOncely` and the host await it. */
export function tracingReady(): Promise<void> {
  return loading;
}

let globalTracer: Tracer | undefined;
// The API's global provider, looked up once: every call of an untraced application asks it
// whether a provider was registered since, and the lookup of the global costs more than asking.
let globalProvider: Api.TracerProvider | undefined;

/**
 * The tracer to use now: the one given, else the global provider's once one is registered, else
 * undefined (no spans). `false` turns tracing off.
 */
export function activeTracer(given: Tracer | false | undefined): Tracer | undefined {
  if (given === false) return undefined;
  if (given) return given;
  if (globalTracer) return globalTracer;
  if (!api) return undefined;
  globalProvider ??= api.trace.getTracerProvider();
  // The global provider is a proxy until the application registers one; until then there is nothing to record.
  const delegate =
    globalProvider instanceof api.ProxyTracerProvider
      ? globalProvider.getDelegateTracer(TRACER_NAME)
      : globalProvider.getTracer(TRACER_NAME);
  if (delegate) globalTracer = delegate;
  return delegate;
}

/** Forgets the global tracer and provider found before (tests register and unregister providers). */
export function resetTracing(): void {
  globalTracer = undefined;
  globalProvider = undefined;
}

/**
 * Starts a span under `parent` (default: the active context). Answers undefined when there is no
 * tracer, so callers pay nothing more.
 */
export function startSpan(
  tracer: Tracer | undefined,
  name: string,
  attributes: Attributes,
  parent?: Context,
): Span | undefined {
  if (!tracer || !api) return undefined;
  return tracer.startSpan(name, { attributes, kind: api.SpanKind.INTERNAL }, parent ?? api.context.active());
}

/** Runs `fn` with `span` as the active span, so spans the application starts inside nest under it. */
export function withSpan<T>(span: Span | undefined, fn: () => T): T {
  if (!span || !api || !span.isRecording()) return fn();
  return api.context.with(api.trace.setSpan(api.context.active(), span), fn);
}

/** Ends a span with its outcome; an error outcome sets the span's status to error. */
export function endSpan(span: Span | undefined, attributes: Attributes, error?: unknown): void {
  if (!span) return;
  if (span.isRecording()) {
    span.setAttributes(attributes);
    if (error !== undefined && api) {
      const e = error as { message?: unknown; code?: unknown };
      span.setStatus({
        code: api.SpanStatusCode.ERROR,
        message: typeof e?.message === 'string' ? e.message : String(error),
      });
    }
  }
  span.end();
}

/**
 * The context of a caller's W3C `traceparent` (and `tracestate`) headers, through the application's
 * registered propagator; undefined when the API is absent or the headers carry no trace.
 */
export function contextFromHeaders(headers: Record<string, string | string[] | undefined>): Context | undefined {
  if (!api || headers.traceparent === undefined) return undefined;
  return api.propagation.extract(api.context.active(), headers, {
    get: (carrier, key) => carrier[key],
    keys: (carrier) => Object.keys(carrier),
  });
}

/**
 * The active context when a recording span is active in it (the engine's execute span, inside the
 * function it runs), else undefined: what a surface hands on to code it starts later.
 */
export function spanContext(): Context | undefined {
  if (!api) return undefined;
  const active = api.context.active();
  return api.trace.getSpan(active)?.isRecording() ? active : undefined;
}

/** Runs `fn` in `parent` as the active context (a caller's continued trace); as is when undefined. */
export function withContext<T>(parent: Context | undefined, fn: () => T): T {
  if (!parent || !api) return fn();
  return api.context.with(parent, fn);
}
