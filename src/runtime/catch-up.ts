// Wiring of the automatic event catch-up for `serve` and `worker`: settings from the environment.
import { ConfigError, loadConfig } from "../config.ts";
import type { Db } from "../db/db.ts";
import type { LogFn } from "../log.ts";
import { runCatchUp } from "../reconcile/catch-up.ts";
import { stripeEventLister } from "../reconcile/stripe-events.ts";
import { stripeEndpoints } from "../receiver/endpoints.ts";
import { readStripeApiSettings, stripeApiClient } from "../stripe-api/client.ts";

/** Catch-up settings: both durations in ms; undefined `idleAfterMs` and `everyMs` mean off. */
export interface CatchUpSettings {
  idleAfterMs: number | undefined;
  everyMs: number | undefined;
}

const UNITS = { s: 1e3, m: 6e4, h: 3.6e6, d: 8.64e7 } as const;

function duration(name: string, raw: string | undefined, problems: string[]): number | undefined {
  if (raw === undefined || raw === "") return undefined;
  const m = /^(\d+)(s|m|h|d)$/.exec(raw.trim());
  if (!m || Number(m[1]) === 0) {
    problems.push(`${name} must be a positive duration such as 15m, 1h or 1d, got "${raw}"`);
    return undefined;
  }
  return Number(m[1]) * UNITS[m[2] as keyof typeof UNITS];
}

/**
 * Reads `RECONCILE_IDLE_AFTER` (backfill at start each endpoint that received nothing for this long)
 * and `RECONCILE_EVERY` (then backfill every endpoint at this interval). Off unless one is set; when
 * one is, `STRIPE_API_KEY` is required (checked here, at start, never logged).
 * @throws ConfigError listing every problem.
 */
export function readCatchUpSettings(env: Record<string, string | undefined>): CatchUpSettings {
  const problems: string[] = [];
  const idleAfterMs = duration("RECONCILE_IDLE_AFTER", env.RECONCILE_IDLE_AFTER, problems);
  const everyMs = duration("RECONCILE_EVERY", env.RECONCILE_EVERY, problems);
  if ((idleAfterMs !== undefined || everyMs !== undefined) && problems.length === 0) {
    try {
      readStripeApiSettings(env);
    } catch (err) {
      if (!(err instanceof ConfigError)) throw err;
      problems.push(...err.problems.map((p) => `${p} (RECONCILE_IDLE_AFTER / RECONCILE_EVERY turn on the event catch-up)`));
    }
  }
  if (problems.length > 0) throw new ConfigError(problems);
  return { idleAfterMs, everyMs };
}

/**
 * Starts the catch-up for the configured Stripe endpoints on `db` when `settings` turn it on;
 * returns its promise (resolves after `signal` aborts), or undefined when off. Without
 * `RECONCILE_IDLE_AFTER` the start check uses `RECONCILE_EVERY` as its threshold.
 */
export function startCatchUp(
  env: Record<string, string | undefined>,
  settings: CatchUpSettings,
  db: Db,
  signal: AbortSignal,
  log: LogFn,
): Promise<void> | undefined {
  if (settings.idleAfterMs === undefined && settings.everyMs === undefined) return undefined;
  const config = loadConfig(env, "whsec_catch_up_reads_no_signatures");
  const stripe = stripeApiClient(readStripeApiSettings(env));
  const endpoints = stripeEndpoints(config.endpoints, config.hybridBudgetMs).map((e) => ({
    target: { provider: e.provider.name, endpoint: e.name, handlers: e.handlers },
    mode: e.mode ?? "sync",
    backoff: e.hybrid?.backoff ?? { baseMs: 1_000, capMs: 600_000 },
  }));
  return runCatchUp({
    db,
    list: stripeEventLister(stripe, {}),
    endpoints,
    idleAfterMs: settings.idleAfterMs ?? settings.everyMs!,
    everyMs: settings.everyMs,
    signal,
    log,
  });
}
