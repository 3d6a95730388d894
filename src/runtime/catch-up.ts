// Wiring of the automatic event catch-up for `serve` and `worker`: settings from the environment.
import type { Telemetry } from "../telemetry.ts";
import { ConfigError, loadEndpointsWithoutSecrets, parseDuration } from "../config.ts";
import type { Db } from "../db/db.ts";
import type { LogFn } from "../log.ts";
import { backfillEndpoint, runBackfillRequests, runCatchUp, type CatchUpEndpoint } from "../reconcile/catch-up.ts";
import { stripeEventLister, type ListEvents } from "../reconcile/stripe-events.ts";
import { stripeEndpoints } from "../receiver/endpoints.ts";
import { readStripeApiSettings, stripeApiClient } from "../stripe-api/client.ts";
import { describeStripeFailure } from "../stripe-api/describe-failure.ts";

/** Catch-up settings: both durations in ms; undefined `idleAfterMs` and `everyMs` mean off. */
export interface CatchUpSettings {
  idleAfterMs: number | undefined;
  everyMs: number | undefined;
}

/**
 * Reads a duration setting `name` ({@link parseDuration}: `15s`, `15m`, `1h`, `1d`) as ms; undefined when
 * unset or empty. A malformed or zero value appends one problem naming `name` and returns undefined.
 */
export function duration(name: string, raw: string | undefined, problems: string[]): number | undefined {
  if (raw === undefined || raw === "") return undefined;
  try {
    return parseDuration(raw);
  } catch {
    problems.push(`${name} must be a positive duration such as 15m, 1h or 1d, got "${raw}"`);
    return undefined;
  }
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
  telemetry?: Telemetry,
): Promise<void> | undefined {
  if (settings.idleAfterMs === undefined && settings.everyMs === undefined) return undefined;
  return runCatchUp({
    telemetry,
    db,
    list: eventLister(env),
    endpoints: catchUpEndpoints(env),
    idleAfterMs: settings.idleAfterMs ?? settings.everyMs!,
    everyMs: settings.everyMs,
    signal,
    log,
  });
}

/**
 * The configured Stripe endpoints as event backfill records them ({@link backfillEndpoint}), read
 * without signing secrets ({@link loadEndpointsWithoutSecrets}: backfill verifies no signature).
 * @throws ConfigError as {@link loadEndpointsWithoutSecrets}.
 */
export function catchUpEndpoints(env: Record<string, string | undefined>): CatchUpEndpoint[] {
  return stripeEndpoints(loadEndpointsWithoutSecrets(env)).map(backfillEndpoint);
}

/**
 * Starts serving the backfill requests health notifications record (`runBackfillRequests`) for the
 * thin endpoints of `env` (`STRIPE_ENDPOINT_KIND_<NAME>=thin`; no signing secrets needed), with
 * `STRIPE_API_KEY`; the events are recorded as {@link catchUpEndpoints} records a thin endpoint's.
 * Returns its promise (resolves after `signal` aborts), or undefined when no thin endpoint is
 * configured.
 * @throws ConfigError for invalid endpoint settings or Stripe API settings.
 */
export function startBackfillRequests(
  env: Record<string, string | undefined>,
  db: Db,
  signal: AbortSignal,
  log: LogFn,
): Promise<void> | undefined {
  const thin = stripeEndpoints(loadEndpointsWithoutSecrets(env)).filter((e) => e.provider.name === "stripe-thin");
  if (thin.length === 0) return undefined;
  return runBackfillRequests({
    db,
    list: eventLister(env),
    endpoints: new Map(thin.map((e) => [e.name, backfillEndpoint(e)])),
    signal,
    log,
  });
}

/**
 * Stripe's Events API with `STRIPE_API_KEY` at `STRIPE_API_BASE`, whose final failures are thrown as an
 * Error whose message names the host (describeStripeFailure: "Cannot connect to the Stripe API at
 * <host>:<port> …"), the stripe-node error as its `cause`: the catch-up logs the message.
 * @throws ConfigError for invalid Stripe API settings.
 */
export function eventLister(env: Record<string, string | undefined>): ListEvents {
  const settings = readStripeApiSettings(env);
  const list = stripeEventLister(stripeApiClient(settings), {});
  return async (call) => {
    try {
      return await list(call);
    } catch (err) {
      const described = describeStripeFailure(err, settings.apiBase);
      throw described === undefined ? err : new Error(described, { cause: err });
    }
  };
}
