// Edge file: loads OpenTelemetry's API when it is installed (an optional peer dependency).
import { telemetryOf, type Telemetry } from "../telemetry.ts";

/**
 * The {@link Telemetry} of `@opentelemetry/api` when the package is installed, else undefined (then no
 * span is ever made). Which SDK, exporter and propagator it reports to is the process's own setup,
 * registered before this runs (a `--preload` file: docs/observability.md); without one, every span is
 * the API's no-op. `OTEL_SDK_DISABLED=true` turns it off here too (OpenTelemetry's "General SDK
 * Configuration" variable).
 */
export async function loadTelemetry(env: Record<string, string | undefined>): Promise<Telemetry | undefined> {
  if (env.OTEL_SDK_DISABLED === "true") return undefined;
  try {
    return telemetryOf(await import("@opentelemetry/api"));
  } catch {
    return undefined;
  }
}

/**
 * Exports the spans the registered SDK still holds (its tracer provider's `forceFlush()`, reached
 * through the API's proxy provider), waiting at most `timeoutMs` ms; called by the entry files as they
 * stop, after the last span ended. Does nothing without an SDK that can flush. Never throws.
 */
export async function flushTelemetry(telemetry: Telemetry | undefined, timeoutMs = 2_000): Promise<void> {
  const proxy = telemetry?.api.trace.getTracerProvider() as { getDelegate?(): { forceFlush?(): Promise<void> } } | undefined;
  const flush = proxy?.getDelegate?.().forceFlush?.();
  if (!flush) return;
  await Promise.race([flush.catch(() => {}), new Promise((resolve) => setTimeout(resolve, timeoutMs))]);
}
