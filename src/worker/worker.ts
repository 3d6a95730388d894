import { claimBatch, type Claim, type ClaimGroup } from "./claim.ts";
import type { HandlerTable } from "../handlers/handler-table.ts";
import { NOTIFY_CHANNEL } from "../inbox/inbox.ts";
import { resolveLoopOptions, type LoopOptions } from "../loop/loop-options.ts";
import { runClaimLoop } from "../loop/claim-loop.ts";
import { assertPatchedPostgres } from "../db/patched-postgres.ts";
import { settleWithin, STUCK_SLACK_MS } from "../db/db.ts";
import { stripeThinProvider } from "../providers/stripe-thin.ts";
import type { Fetcher } from "./stripe-fetch.ts";
import { chunkClaims, MAX_BATCH, processClaims } from "./process-batch.ts";
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
  /**
   * Rows at most per slot's transaction (process-batch.ts: one savepoint each, one COMMIT for them all),
   * 1 to {@link MAX_BATCH}. Default {@link DEFAULT_BATCH}.
   */
  batch?: number;
  /**
   * Rows of one connected account this worker holds at most at once (claimed, not finished), so a
   * noisy account leaves the rest of the worker to the others (claim.ts); the platform's own events
   * (account `""`) are not bounded. Default {@link defaultAccountMax}; `concurrency × batch` or more
   * turns the bound off. Each worker process bounds its own rows.
   */
  accountMax?: number;
}

/** Rows per slot's transaction unless told otherwise (docs/performance.md, "Batch size"). */
export const DEFAULT_BATCH = 32;

/**
 * The default bound on one connected account's rows held at once: half of what the worker holds at
 * most (`concurrency × batch`, rounded up), and never less than one batch.
 */
export function defaultAccountMax(concurrency: number, batch: number): number {
  return Math.max(batch, Math.ceil((concurrency * batch) / 2));
}

/**
 * The async-mode worker loop (seed §6, {@link runClaimLoop} on `NOTIFY_CHANNEL`): for the free slots,
 * claims up to `batch` rows each in one claim statement (claim.ts: attempts counted and leases taken,
 * committed before any work), groups them by business object into one unit per slot
 * ({@link chunkClaims}) and starts each unit at once ({@link processClaims}: its first-attempt rows in
 * one transaction with a savepoint each, bounded by `timeoutMs`; retried, thin and refetch rows alone),
 * so a row's lease runs only while its unit is worked on. Logs one line per row: event id, type,
 * attempt, outcome, the error or the fetcher's note, duration ms (never the payload). Resolves after
 * `signal` aborts and the rows in flight finished; database errors never end it.
 * @throws Error when `timeoutMs >= leaseMs` (a row could outlive its lease while still running), when
 *   `batch` is not a whole number from 1 to {@link MAX_BATCH}, or when the postgres.js loaded is
 *   unpatched ({@link assertPatchedPostgres}).
 */
export async function runWorker(options: WorkerOptions): Promise<void> {
  assertPatchedPostgres();
  const resolved = resolveLoopOptions(options, "Worker");
  const { db, leaseMs, timeoutMs, maxAttempts, backoff, log } = resolved;
  const batch = options.batch ?? DEFAULT_BATCH;
  if (!Number.isInteger(batch) || batch < 1 || batch > MAX_BATCH)
    throw new Error(`Worker batch must be a whole number from 1 to ${MAX_BATCH}, got ${batch}`);
  const accountMax = options.accountMax ?? defaultAccountMax(resolved.concurrency, batch);
  if (!Number.isInteger(accountMax) || accountMax < 1)
    throw new Error(`Worker account bound must be a whole number ≥ 1, got ${accountMax}`);
  const providers = Object.keys(options.tables).filter((p) => options.fetcher !== undefined || p !== stripeThinProvider.name);
  const processOptions = { ...options, timeoutMs, maxAttempts, backoff }; // tables, fetcher, telemetry; the defaults filled
  const held = new Map<string, number>(); // rows of each account claimed and not finished (claim.ts `accounts`)
  const hold = (unit: readonly Claim[], by: 1 | -1) => {
    for (const { account } of unit) {
      const n = (held.get(account) ?? 0) + by;
      if (n > 0) held.set(account, n);
      else held.delete(account);
    }
  };
  let capped = false; // the last claim left rows of an account at its bound: claim again as rows finish
  let after: ClaimGroup | undefined; // where the last claim's walk stopped at its bound
  const work = async (unit: Claim[], claimedAt: number) => {
    let results: Awaited<ReturnType<typeof processClaims>>;
    try {
      results = await processClaims(db, unit, processOptions);
    } finally {
      hold(unit, -1); // however the unit ended, its rows are no longer held here
    }
    for (const [i, result] of results.entries()) {
      const claim = unit[i]!;
      log({
        event_id: claim.eventId,
        endpoint: claim.endpoint,
        type: claim.eventType,
        attempt: claim.attempt,
        outcome: result.outcome,
        ...(result.error ? { error: result.error } : {}),
        ...(result.note ? { note: result.note } : {}),
        ...(result.traceId ? { trace_id: result.traceId, span_id: result.spanId } : {}),
        duration_ms: Date.now() - claimedAt,
        level:
          result.outcome === "needs_review"
            ? "error"
            : result.outcome === "failed" || result.outcome === "deferred" || result.outcome === "released"
              ? "warn"
              : "info",
        message: `worker ${result.outcome}`,
      });
    }
    // Released rows are due again now, and after a retried row the next may be claimed: claim without waiting.
    const retriedDone = unit.filter((c) => c.attempt > 1).length;
    retriedInFlight -= retriedDone;
    return retriedDone > 0 || capped || results.some((r) => r.outcome === "released" || r.outcome === "held");
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

  let retriedInFlight = 0; // rows already tried being processed: at most one at a time (claim.ts `retried`)
  const scope = options.fetcher && (options.fetcher.scope ?? { providers, endpoints: [] });
  const alone = (c: Claim) => c.attempt > 1 || options.fetcher?.needsFetch(c) === true;
  await runClaimLoop({
    ...resolved,
    label: "worker",
    channel: NOTIFY_CHANNEL,
    claim: async (free) => {
      let more = false;
      const retried = retriedInFlight > 0 ? 0 : 1;
      const rows = await settleWithin(
        claimBatch(db, {
          limit: free * batch,
          retried,
          ...(scope ? { reads: { ...scope, limit: free } } : {}),
          leaseMs,
          maxAttempts,
          providers,
          accounts: { max: accountMax, held },
          after,
          onParked: parked,
          onWalk: (walk) => ((more = walk.more), (capped = walk.capped), (after = walk.stoppedAt)),
        }),
        timeoutMs + STUCK_SLACK_MS,
        "The worker's claim",
      );
      const retriedNow = rows.filter((c) => c.attempt > 1).length;
      retriedInFlight += retriedNow;
      hold(rows, 1);
      // More may be due when the claim's walk left due rows this worker may take (it reads one row past
      // each group's share, so it knows), or the claim took as many retried or API-read rows as it may.
      // Not merely because it took `free * batch` rows: an account at its bound would then be claimed
      // again at once for nothing.
      more ||=
        (retried > 0 && retriedNow === retried) || (scope !== undefined && rows.filter((c) => c.attempt <= 1 && alone(c)).length === free);
      return { units: chunkClaims(rows, free, batch, alone), more };
    },
    work,
    size: (unit) => unit.length,
  });
}
