/**
 * What the observability tests capture: log lines from a pino-shaped logger, hook events, and
 * spans from OpenTelemetry's SDK with its in-memory exporter on the global API.
 */
import { context, propagation, trace } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import { W3CTraceContextPropagator } from '@opentelemetry/core';
import { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor } from '@opentelemetry/sdk-trace-base';
import type { DecisionEvent, OncelyLogger } from '../../../src/core/observer.js';
import { resetTracing } from '../../../src/core/tracing.js';

/** One line a logger was given. */
export interface LogLine {
  level: 'info' | 'warn' | 'error';
  fields: Record<string, unknown>;
  message: string;
}

/** A logger of pino's shape that keeps its lines, and a hook that keeps its events. */
export function capture(): {
  logger: OncelyLogger;
  lines: LogLine[];
  onDecision: (e: DecisionEvent) => void;
  events: DecisionEvent[];
} {
  const lines: LogLine[] = [];
  const events: DecisionEvent[] = [];
  const at = (level: LogLine['level']) => (fields: Record<string, unknown>, message: string) => {
    lines.push({ level, fields, message });
  };
  return {
    logger: { info: at('info'), warn: at('warn'), error: at('error') },
    lines,
    onDecision: (event) => events.push(event),
    events,
  };
}

/** Registers a tracer provider, the async-hooks context manager and the W3C propagator globally. */
export function installTracing(): { exporter: InMemorySpanExporter; uninstall: () => void } {
  const exporter = new InMemorySpanExporter();
  const provider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] });
  const manager = new AsyncLocalStorageContextManager().enable();
  context.setGlobalContextManager(manager);
  propagation.setGlobalPropagator(new W3CTraceContextPropagator());
  trace.setGlobalTracerProvider(provider);
  resetTracing();
  return {
    exporter,
    uninstall: () => {
      trace.disable();
      context.disable();
      propagation.disable();
      resetTracing();
    },
  };
}
