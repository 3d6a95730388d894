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
