// Edge file: what the claim-loop commands (`bun run worker`, `bun run dispatch`) share: flags,
// environment variables, SIGTERM/SIGINT and the database at start.
import { parseArgs, type ParseArgsOptionsConfig } from "node:util";
import type { Pooler } from "../db/db.ts";
import { jsonLines, readLogLevel, type LogFn } from "../log.ts";
import { connectDatabase } from "./database-tls.ts";
import { openReadyDatabase } from "./ready-database.ts";
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
  "heartbeat-ms",
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
  "heartbeat-ms": 10_000,
};

/**
 * The command line of a claim-loop command, from `process.argv`: {@link LOOP_FLAGS}, `--no-listen`,
 * `--help` and the command's `extra` flags. `--help` prints `usage` and exits 0; an unknown flag or a
 * missing value goes to `usageError` (which exits).
 */
export function parseLoopArgs(
  usage: string,
  extra: ParseArgsOptionsConfig,
  usageError: (message: string) => never,
): Record<string, string | boolean | undefined> {
  let parsed;
  try {
    parsed = parseArgs({
      options: {
        ...Object.fromEntries(LOOP_FLAGS.map((n) => [n, { type: "string" as const }])),
        ...extra,
        "no-listen": { type: "boolean", default: false },
        help: { type: "boolean", short: "h", default: false },
      },
    });
  } catch (err) {
    usageError(err instanceof Error ? err.message : String(err));
  }
  if (parsed.values.help) {
    console.log(usage);
    process.exit(0);
  }
  return parsed.values;
}

/** One JSON line per event of a claim-loop command (src/log.ts), below `LOG_LEVEL` dropped; a bad `LOG_LEVEL` goes to `usageError`. */
export function loopLog(usageError: (message: string) => never): LogFn {
  try {
    return jsonLines({ level: readLogLevel(process.env) });
  } catch (err) {
    usageError(err instanceof Error ? err.message : String(err));
  }
}

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

/**
 * The database of claim-loop command `label` (`worker`, `dispatcher`) at start: the signals first
 * ({@link abortOnSignals}, `--timeout-ms` + {@link STOP_GRACE_EXTRA_MS} of grace: a stop during start-up
 * ends the start at once), then {@link openReadyDatabase} (`command` names it in messages, `waitMs` ms at
 * most) on a pool of `--concurrency` + 1 connections named `webhook-inbox <label>`. Returns the ready
 * database and the `controller` the signals abort; a stop before then logs `{ <label>: "stopped" }` and
 * exits 0, a failed start exits 1.
 */
export async function openLoopDatabase(label: string, command: string, settings: LoopSettings, waitMs: number, pooler: Pooler, log: LogFn) {
  const controller = abortOnSignals(label, settings["timeout-ms"] + STOP_GRACE_EXTRA_MS);
  const ready = await openReadyDatabase({
    command,
    env: process.env,
    connect: (url) => connectDatabase(url, { max: settings.concurrency + 1, applicationName: `webhook-inbox ${label}`, pooler }),
    signal: controller.signal,
    waitMs,
    pooler,
  });
  if (!ready) {
    log({ [label]: "stopped" });
    process.exit(0);
  }
  return { ...ready, controller };
}
