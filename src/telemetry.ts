import type * as Otel from "@opentelemetry/api";

/**
 * OpenTelemetry as the core uses it: the `@opentelemetry/api` module (an optional peer dependency,
 * loaded by the entry files when it is installed: runtime/telemetry.ts) and this package's tracer.
 * With the API but no SDK registered, every span is the API's no-op; without the API there is no
 * `Telemetry` at all and nothing is called.
 */
export interface Telemetry {
  api: typeof Otel;
  tracer: Otel.Tracer;
}

/** Tracer name: the instrumentation scope of every span (OpenTelemetry "Instrumentation Scope"). */
export const TRACER_NAME = "webhook-inbox";

/** The {@link Telemetry} of an API module, or undefined when it is not installed. */
export function telemetryOf(api: typeof Otel | undefined): Telemetry | undefined {
  return api ? { api, tracer: api.trace.getTracer(TRACER_NAME) } : undefined;
}

/** What one span is: its name, kind, attributes, parent context and links (OpenTelemetry trace API). */
export interface SpanSpec {
  name: string;
  kind?: Otel.SpanKind;
  attributes?: Otel.Attributes;
  /** The parent; default: none (a new trace). */
  parent?: Otel.Context;
  links?: Otel.Link[];
}

/**
 * Runs `fn` inside a span of `spec` and ends the span when `fn` settles; a throw is recorded on the
 * span (status ERROR, `error.type` = the error's class name, OpenTelemetry "Recording errors") and
 * rethrown. `fn` gets the span (to add attributes) and the context holding it (the parent of child
 * spans), or neither when `telemetry` is undefined: then `fn` alone runs, at no other cost.
 * @throws what `fn` throws.
 */
export async function inSpan<T>(
  telemetry: Telemetry | undefined,
  spec: SpanSpec,
  fn: (span?: Otel.Span, context?: Otel.Context) => Promise<T>,
): Promise<T> {
  if (!telemetry) return fn();
  const { api, tracer } = telemetry;
  const parent = spec.parent ?? api.ROOT_CONTEXT;
  const span = tracer.startSpan(spec.name, { kind: spec.kind, attributes: spec.attributes, links: spec.links }, parent);
  try {
    return await fn(span, api.trace.setSpan(parent, span));
  } catch (err) {
    span.setAttribute("error.type", err instanceof Error ? err.constructor.name : "unknown");
    span.setStatus({ code: api.SpanStatusCode.ERROR, message: err instanceof Error ? err.message.slice(0, 300) : undefined });
    throw err;
  } finally {
    span.end();
  }
}

const TRACEPARENT = /^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$/;

/**
 * The W3C `traceparent` of `span` (`00-<trace id>-<span id>-<flags>`, W3C Trace Context §3.2), or
 * undefined for no span or a span without a valid context (the API's no-op span).
 */
export function traceparentOf(telemetry: Telemetry | undefined, span: Otel.Span | undefined): string | undefined {
  if (!telemetry || !span) return undefined;
  const c = span.spanContext();
  if (!telemetry.api.isSpanContextValid(c)) return undefined;
  return `00-${c.traceId}-${c.spanId}-${(c.traceFlags & 0xff).toString(16).padStart(2, "0")}`;
}

/**
 * The remote span context a stored `traceparent` names (W3C Trace Context §3.2, version 00), or
 * undefined when `traceparent` is missing or malformed (it is then ignored, never an error).
 */
export function spanContextOf(traceparent: string | null | undefined): Otel.SpanContext | undefined {
  const m = traceparent ? TRACEPARENT.exec(traceparent) : null;
  if (!m || /^0+$/.test(m[1]!) || /^0+$/.test(m[2]!)) return undefined;
  return { traceId: m[1]!, spanId: m[2]!, traceFlags: Number.parseInt(m[3]!, 16), isRemote: true };
}

/** The context of an incoming request's trace headers (the registered propagator, W3C by default in SDKs). */
export function requestContext(telemetry: Telemetry, headers: Headers): Otel.Context {
  return telemetry.api.propagation.extract(telemetry.api.ROOT_CONTEXT, headers, {
    get: (carrier, key) => carrier.get(key) ?? undefined,
    keys: (carrier) => [...carrier.keys()],
  });
}

/**
 * Messaging attributes of one event (OpenTelemetry semantic conventions, "Messaging spans"): the
 * provider as `messaging.system`, the endpoint as `messaging.destination.name`, the provider's event id
 * as `messaging.message.id`, and `operation` (`receive`: recording a delivery; `process`: applying it).
 */
export function messagingAttributes(
  provider: string,
  endpoint: string,
  eventId: string,
  eventType: string,
  operation: "receive" | "process",
): Otel.Attributes {
  return {
    "messaging.system": provider,
    "messaging.destination.name": endpoint,
    "messaging.message.id": eventId,
    "messaging.operation.type": operation,
    "messaging.operation.name": operation,
    "webhook_inbox.event.type": eventType,
  };
}
