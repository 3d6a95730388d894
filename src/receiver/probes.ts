import type { Db } from "../db/db.ts";
import { within } from "../db/sleep.ts";
import { AppError, errorResponse } from "../errors.ts";
import { sameText } from "../providers/hmac.ts";
import type { Metrics } from "./metrics.ts";
import { readBackfillAges, readBacklog, readOutboxBacklog, readReconcileDrift } from "../inbox/backlog.ts";
import { arrivalGaps, fillInboxHours, readInboxHours } from "../inbox/hours.ts";
import { readHeartbeats } from "../loop/heartbeat.ts";
import { readPauses } from "../inbox/pauses.ts";

/** Dependencies of {@link createProbes}. */
export interface ProbeDeps {
  db: Db;
  metrics: Metrics;
  /** Configured provider/endpoint pairs: their backlog gauges are reported even when zero. */
  endpoints: readonly { provider: string; endpoint: string }[];
  /** Number of migrations the code expects (readiness fails until the database has them all). */
  schemaVersion?: number;
  /** When set, `/metrics` requires `Authorization: Bearer <token>`. */
  metricsToken?: string;
}

/** Retry-After for 503s, seconds. */
export const RETRY_AFTER_SEC = "5";
const PROBE_TIMEOUT_MS = 2_000;
/**
 * Closed hours of the hourly rollup a scrape computes at most: one hour's rows take ms to tens of ms
 * (docs/scale.md, "Health over 30 days"); newest first, so it keeps up, at one an hour, and a scrape every
 * 15 s computes 30 days in three hours after an upgrade. Bounded on the server by FILL_TIMEOUT_MS.
 */
const FILL_HOURS_PER_SCRAPE = 1;
const FILL_TIMEOUT_MS = 500;

/**
 * The operational routes: `healthz` (liveness: the process answers; never touches the database, so a
 * database outage does not get the receiver restarted), `readyz` (the database answers within 2 s and
 * has every migration this code expects), and `metrics` (Prometheus text; optional bearer token).
 */
export function createProbes(deps: ProbeDeps) {
  async function readyz(): Promise<Response> {
    try {
      const [row] = await bounded(
        deps.db<{ version: number | null }[]>`select max(version)::int as version from schema_migrations`.execute(),
      );
      const version = row?.version ?? 0;
      if (deps.schemaVersion !== undefined && version < deps.schemaVersion) {
        return Response.json(
          { status: "migrations_pending", schema_version: version, expected: deps.schemaVersion },
          { status: 503, headers: { "retry-after": RETRY_AFTER_SEC } },
        );
      }
      return Response.json({ status: "ready", schema_version: version });
    } catch {
      return errorResponse(new AppError("database_unavailable", "Database is not reachable or not migrated"), {
        "retry-after": RETRY_AFTER_SEC,
      });
    }
  }

  async function metrics(request: Request): Promise<Response> {
    if (deps.metricsToken !== undefined && !sameText(request.headers.get("authorization") ?? "", `Bearer ${deps.metricsToken}`)) {
      return Response.json(
        { error: "unauthorized", message: "GET /metrics needs Authorization: Bearer <METRICS_TOKEN>" },
        { status: 401, headers: { "www-authenticate": "Bearer" } },
      );
    }
    // A server-side bound just under the client's: a read blocked on a lock (a migration, VACUUM FULL)
    // is cancelled by PostgreSQL and frees the probe connection, so /readyz does not queue behind it.
    // First, a few closed hours of the hourly rollup (inbox/hours.ts) are computed, newest first, so the
    // silence gauges stay current however rarely the operator's page is opened; a failure there only
    // leaves them as they were.
    const read = fillInboxHours(deps.db, { maxHours: FILL_HOURS_PER_SCRAPE, statementTimeoutMs: FILL_TIMEOUT_MS })
      .catch(() => 0)
      .then(() =>
        deps.db.begin(async (tx) => {
          await tx`select set_config('statement_timeout', ${String(PROBE_TIMEOUT_MS - 250)}, true)`;
          return {
            inbox: await readBacklog(tx),
            outbox: await readOutboxBacklog(tx),
            backfill: await readBackfillAges(tx),
            processes: await readHeartbeats(tx),
            arrivals: arrivalGaps(await readInboxHours(tx, 7)),
            reconcile: await readReconcileDrift(tx),
            pauses: await readPauses(tx),
          };
        }),
      );
    const backlog = await bounded(read).catch(() => null);
    return new Response(deps.metrics.render(backlog, deps.endpoints), {
      headers: { "content-type": "text/plain; version=0.0.4; charset=utf-8" },
    });
  }

  return {
    healthz: () => Response.json({ status: "ok" }),
    readyz,
    metrics,
  };
}

/** Rejects when `work` takes longer than {@link PROBE_TIMEOUT_MS}. */
function bounded<T>(work: Promise<T>): Promise<T> {
  return within(work, PROBE_TIMEOUT_MS, () => new Error(`Timed out after ${PROBE_TIMEOUT_MS} ms`));
}
