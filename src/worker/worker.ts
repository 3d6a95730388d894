import { claimBatch, type Claim } from "./claim.ts";
import type { HandlerTable } from "../handlers/handler-table.ts";
import { NOTIFY_CHANNEL } from "../inbox/inbox.ts";
import { resolveLoopOptions, type LoopOptions } from "../loop/loop-options.ts";
import { runClaimLoop } from "../loop/claim-loop.ts";
import { describeError } from "../errors.ts";
import { assertPatchedPostgres } from "../db/patched-postgres.ts";
import { settleWithin, STUCK_SLACK_MS } from "../db/db.ts";
import { stripeThinProvider } from "../providers/stripe-thin.ts";
import type { Fetcher } from "./stripe-fetch.ts";
import { processClaim } from "./process-claim.ts";
import type { Telemetry } from "../telemetry.ts";

/** Settings of {@link runWorker}; times in ms (the shared ones in {@link LoopOptions}). */
export interface WorkerOptions extends LoopOptions {
  /**
   * Handler tables by inbox provider (the receiver's tables: one definition). The worker claims rows
   * of these providers only, and thin rows only with a `fetcher`: a worker never takes a row it cannot
   * process.
   */
  tables: Readonly<Record<string, HandlerTable>>;
  /** Reads from the Stripe API what thin rows point to and what refetch endpoints' rows are about (stripe-fetch.ts). */
  fetcher?: Fetcher;
  /** OpenTelemetry: a span per claim linked to the recording span (process-claim.ts). Default: none. */
  telemetry?: Telemetry;
}

/**
 * The async-mode worker loop (seed §6, {@link runClaimLoop} on `NOTIFY_CHANNEL`): claims as many due rows
 * as slots are free (one claim statement: claim.ts) and starts each at once in its slot ({@link processClaim}:
 * its own transaction, bounded by `timeoutMs`), so a row's lease runs only while it is worked on. Logs one
 * line per row: event id, type, attempt, outcome, the error or the fetcher's note, duration ms (never the
 * payload). Resolves after `signal` aborts and the rows in flight finished; database errors never end it.
 * @throws Error when `timeoutMs >= leaseMs` (a row could outlive its lease while still running), or
 *   when the postgres.js loaded is unpatched ({@link assertPatchedPostgres}).
 */
export async function runWorker(options: WorkerOptions): Promise<void> {
  assertPatchedPostgres();
  const resolved = resolveLoopOptions(options, "Worker");
  const { db, leaseMs, timeoutMs, maxAttempts, backoff, log } = resolved;
  const providers = Object.keys(options.tables).filter((p) => options.fetcher !== undefined || p !== stripeThinProvider.name);
  const processOptions = { ...options, timeoutMs, maxAttempts, backoff }; // tables, fetcher, telemetry; the defaults filled
  const work = (claim: Claim, claimedAt: number) => {
    const line = { event_id: claim.eventId, endpoint: claim.endpoint, type: claim.eventType, attempt: claim.attempt };
    // Bounded here too: a row whose connection stopped answering frees its slot; its lease runs out and it is claimed again.
    return settleWithin(processClaim(db, claim, processOptions), 2 * timeoutMs + STUCK_SLACK_MS, "The row's transaction").then(
      (result) =>
        log({
          ...line,
          outcome: result.outcome,
          ...(result.error ? { error: result.error } : {}),
          ...(result.note ? { note: result.note } : {}),
          ...(result.traceId ? { trace_id: result.traceId, span_id: result.spanId } : {}),
          duration_ms: Date.now() - claimedAt,
          level:
            result.outcome === "needs_review" ? "error" : result.outcome === "failed" || result.outcome === "deferred" ? "warn" : "info",
          message: `worker ${result.outcome}`,
        }),
      // Not expected (processClaim reports failures as outcomes): the lease expires and the row is claimed again.
      (err: unknown) =>
        log({
          ...line,
          outcome: "failed",
          error: describeError(err),
          duration_ms: Date.now() - claimedAt,
          level: "error",
          message: "worker failed",
        }),
    );
  };
  const parked = (rows: { eventId: string; endpoint: string; eventType: string; attempts: number }[]) => {
    for (const r of rows)
      log({
        event_id: r.eventId,
        endpoint: r.endpoint,
        type: r.eventType,
        attempt: r.attempts,
        outcome: "needs_review",
        error: "attempt limit reached with no outcome recorded",
      });
  };

  await runClaimLoop({
    ...resolved,
    label: "worker",
    channel: NOTIFY_CHANNEL,
    claim: (limit) =>
      settleWithin(
        claimBatch(db, { limit, leaseMs, maxAttempts, providers, onParked: parked }),
        timeoutMs + STUCK_SLACK_MS,
        "The worker's claim",
      ),
    work,
  });
}
