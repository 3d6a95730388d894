// OpenTelemetry for `bun run serve`, `worker` and `dispatch`: load before the command with
//   bun --preload ./docs/observability/otel-bun-preload.ts src/bin/serve.ts
// It registers a tracer provider that exports spans over OTLP/HTTP (JSON) to
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or OTEL_EXPORTER_OTLP_ENDPOINT + /v1/traces (default
// http://localhost:4318/v1/traces), in batches every OTEL_BSP_SCHEDULE_DELAY ms (default 5000), under
// OTEL_SERVICE_NAME (default webhook-inbox), and the W3C trace-context propagator (incoming
// `traceparent` headers continue the caller's trace). Needs the packages named below installed.
import { propagation, trace } from "@opentelemetry/api";
import { W3CTraceContextPropagator } from "@opentelemetry/core";
import { OTLPTraceExporter } from "@opentelemetry/exporter-trace-otlp-http";
import { resourceFromAttributes } from "@opentelemetry/resources";
import { BatchSpanProcessor, TracerProvider } from "@opentelemetry/sdk-trace";

const provider = new TracerProvider({
  resource: resourceFromAttributes({ "service.name": process.env.OTEL_SERVICE_NAME ?? "webhook-inbox" }),
  spanProcessors: [
    new BatchSpanProcessor({
      exporter: new OTLPTraceExporter(),
      scheduledDelayMillis: Number(process.env.OTEL_BSP_SCHEDULE_DELAY ?? 5_000),
    }),
  ],
});
trace.setGlobalTracerProvider(provider);
propagation.setGlobalPropagator(new W3CTraceContextPropagator());
