// Edge file: the settings and signal handling shared by the claim-loop commands (`bun run worker`,
// `bun run dispatch`): flags, environment variables and SIGTERM/SIGINT.
import { jsonLines } from "../log.ts";
import { onStopSignals, REPEAT_WINDOW_MS } from "./signals.ts";

/** The numeric flags of a claim loop, in ms except `concurrency` and `max-attempts`. */
export const LOOP_FLAGS = [
  "concurrency",
  "lease-ms",
  "timeout-ms",
  "max-attempts",
  "poll-ms",
  "backoff-base-ms",
  "backoff-cap-ms",
] as const;
/** The claim-loop settings by flag name (ms or counts, as each flag says), read from flags and env. */
export type LoopSettings = Record<(typeof LOOP_FLAGS)[number], number>;

const DEFAULTS: LoopSettings = {
  concurrency: 4,
  "lease-ms": 60_000,
  "timeout-ms": 30_000,
  "max-attempts": 10,
  "poll-ms": 5_000,
  "backoff-base-ms": 1_000,
  "backoff-cap-ms": 600_000,
};

/** `parseArgs` option specs for {@link LOOP_FLAGS}. */
export const loopFlagSpecs = Object.fromEntries(LOOP_FLAGS.map((n) => [n, { type: "string" as const }]));

/**
 * Reads each flag from `values` (parsed flags), else `<envPrefix>_<FLAG>` (e.g. `WORKER_LEASE_MS`),
 * else its default. Appends a problem naming the flag and the variable for anything that is not a whole
 * number ≥ 1, and one when the timeout is not shorter than the lease.
 */
export function readLoopSettings(
  values: Record<string, unknown>,
  env: Record<string, string | undefined>,
  envPrefix: string,
  problems: string[],
): LoopSettings {
  const settings = { ...DEFAULTS };
  for (const name of LOOP_FLAGS) {
    const envName = `${envPrefix}_${name.toUpperCase().replaceAll("-", "_")}`;
    const raw = values[name] ?? env[envName];
    const value = raw === undefined ? DEFAULTS[name] : Number(raw);
    if (!/^\d+$/.test(String(raw ?? value)) || !Number.isSafeInteger(value) || value < 1) {
      problems.push(`--${name} (${envName}) must be a whole number ≥ 1, got "${String(raw)}"`);
    }
    settings[name] = value;
  }
  if (settings["timeout-ms"] >= settings["lease-ms"]) {
    problems.push(`--timeout-ms (${settings["timeout-ms"]}) must be shorter than --lease-ms (${settings["lease-ms"]})`);
  }
  return settings;
}

/**
 * SIGTERM/SIGINT abort the returned controller (stop claiming, finish in-flight work); a repeated
 * SIGTERM is ignored, and a SIGINT later than {@link REPEAT_WINDOW_MS} after the first signal (a second
 * Ctrl-C: under `bun run` one arrives twice) exits at once with status 1 (see onStopSignals).
 * Logs `{ <label>: "stopping", signal }`. A process still running `stopGraceMs` ms after the signal
 * (a query that never returns, e.g. while no listed host is a primary during a failover) logs
 * `{ <label>: "stop_timeout" }` at level error and exits with status 1: what it had claimed is not lost,
 * its lease runs out and another worker claims it again. Give it the longest in-flight work may take
 * (`--timeout-ms`) plus the pool's close.
 */
export function abortOnSignals(label: string, stopGraceMs: number): AbortController {
  const controller = new AbortController();
  onStopSignals(
    (signal) => {
      jsonLines()({ [label]: "stopping", signal });
      controller.abort();
      setTimeout(() => {
        jsonLines()({
          [label]: "stop_timeout",
          level: "error",
          message: `${label} did not stop within ${stopGraceMs} ms of ${signal}; exiting (its unfinished rows are claimed again when their lease ends)`,
        });
        process.exit(1);
      }, stopGraceMs).unref();
    },
    () => process.exit(1),
  );
  return controller;
}

/** How long past `--timeout-ms` a stopping worker or dispatcher may take to close its pool, ms. */
export const STOP_GRACE_EXTRA_MS = 10_000;
