// Wiring of the failover watch for `serve` and `worker`: settings from the environment, the check loop,
// and the backfill of the requests a detected primary change records (docs/failover.md).
import { ConfigError, loadEndpointsWithoutSecrets } from "../config.ts";
import { settleWithin, STUCK_SLACK_MS, type Db } from "../db/db.ts";
import { sleep } from "../db/sleep.ts";
import type { LogFn } from "../log.ts";
import { createWakeUp } from "../loop/wake-up.ts";
import { backfillEndpoint, runBackfillRequests } from "../reconcile/catch-up.ts";
import { notePrimary } from "../reconcile/primary-change.ts";
import { stripeEndpoints } from "../receiver/endpoints.ts";
import { duration, eventLister, type CatchUpSettings } from "./catch-up.ts";

/** Failover watch settings, ms. `checkEveryMs` 0: off. */
export interface FailoverSettings {
  checkEveryMs: number;
  /** How far before the old primary was last seen the backfill window starts. */
  marginMs: number;
}

/**
 * Reads `FAILOVER_CHECK_MS` (how often the primary is checked, ms; default 5000; 0 turns the watch off)
 * and `FAILOVER_BACKFILL_MARGIN` (a duration such as 15m, 1h, 3d; default 1h).
 * @throws ConfigError listing every problem.
 */
export function readFailoverSettings(env: Record<string, string | undefined>): FailoverSettings {
  const problems: string[] = [];
  const raw = env.FAILOVER_CHECK_MS ?? "5000";
  if (!/^\d+$/.test(raw)) problems.push(`FAILOVER_CHECK_MS must be a whole number of ms (0 turns the watch off), got "${raw}"`);
  const marginMs = duration("FAILOVER_BACKFILL_MARGIN", env.FAILOVER_BACKFILL_MARGIN, problems) ?? 3_600_000;
  if (problems.length > 0) throw new ConfigError(problems);
  return { checkEveryMs: Number(raw), marginMs };
}

/** Longest wait for one primary check, ms: a statement's default bound plus the slack of a stuck call. */
const PRIMARY_CHECK_BOUND_MS = 10_000 + STUCK_SLACK_MS;

/**
 * Starts the failover watch on `db` (off when `settings.checkEveryMs` is 0): every `checkEveryMs` ms it
 * records the primary it reaches ({@link notePrimary}); a change records backfill requests for the
 * classic Stripe endpoints of `env` and logs one line. With the event catch-up on (`catchUp`:
 * `RECONCILE_IDLE_AFTER` / `RECONCILE_EVERY`, so `STRIPE_API_KEY` is set) this process also serves those
 * requests (polled at the same interval, and at once after a change it noticed); without it they wait,
 * shown by `inbox status`, /admin and /metrics, and the line names the `bun run reconcile events --since`
 * run that finishes them. A failed check (the database is switching) is logged once per streak of
 * failures and retried. Returns a promise that resolves after `signal` aborts.
 * @throws ConfigError for invalid endpoint or Stripe API settings.
 */
export function startFailoverWatch(
  env: Record<string, string | undefined>,
  settings: FailoverSettings,
  catchUp: CatchUpSettings,
  db: Db,
  signal: AbortSignal,
  log: LogFn,
): Promise<void> | undefined {
  if (settings.checkEveryMs === 0) return undefined;
  const classic = stripeEndpoints(loadEndpointsWithoutSecrets(env)).filter((e) => e.provider.name === "stripe");
  const serving = catchUp.idleAfterMs !== undefined || catchUp.everyMs !== undefined;
  // Without the catch-up, the run that finishes the requests (connected accounts' too).
  const allAccounts = classic.some((e) => e.connect) ? " --all-accounts" : "";
  const wakeUp = createWakeUp(signal);
  const watch = async () => {
    let failing = false;
    while (!signal.aborted) {
      try {
        // Bounded: a check whose commit waits for a missing synchronous standby must not stop the watch.
        const check = await settleWithin(notePrimary(db, classic, settings.marginMs), PRIMARY_CHECK_BOUND_MS, "The primary check");
        if (failing) log({ failover_check: "recovered" });
        failing = false;
        if (check.previous) {
          log({
            failover: "primary changed",
            from: `${check.previous.systemIdentifier}/${check.previous.timelineId}`,
            to: `${check.current.systemIdentifier}/${check.current.timelineId}`,
            backfill_since: check.since?.toISOString(),
            requests: check.requests,
            ...(serving
              ? {}
              : { see: `bun run reconcile events --since ${check.since?.toISOString()}${allAccounts} (event catch-up is off)` }),
          });
          wakeUp.nudge();
        }
      } catch (err) {
        if (!failing) log({ failover_check: "failed", error: (err instanceof Error ? err.message : String(err)).slice(0, 300) });
        failing = true;
      }
      await sleep(settings.checkEveryMs, signal);
    }
  };
  const backfill =
    serving && classic.length > 0
      ? runBackfillRequests({
          db,
          list: eventLister(env),
          endpoints: new Map(classic.map((e) => [e.name, backfillEndpoint(e)])),
          signal,
          log,
          pollMs: settings.checkEveryMs,
          // The loop takes a request right after its pause: a change noticed meanwhile is served then.
          sleep: (ms) => wakeUp.sleep(ms).then(wakeUp.claiming),
        })
      : undefined;
  return Promise.all([watch(), backfill]).then(() => {});
}
