import { isPermanent, type Db, type Tx } from "../db/db.ts";
import type { Claim } from "./claim.ts";
import { lockUnsettled, recordFailure, type ProcessOptions, type WorkOutcome } from "./process-claimed.ts";
import type { BackfillWindow, Fetcher, Resolution } from "./stripe-fetch.ts";
import { retryableStripeError } from "../stripe-api/retry.ts";
import { describeError, PermanentError } from "../errors.ts";
import { changeOnce } from "../handlers/change-once.ts";
import { recordBackfillRequest } from "../inbox/backfill-requests.ts";

/** What a fetched row came to: the worker's outcomes, plus `object_missing` and `deferred` (API unavailable: due again later, no attempt used). */
export type FetchedOutcome = WorkOutcome | "object_missing" | "deferred";

/** Options of {@link processFetched}: the worker's, and where backfill requests go. */
export interface FetchedOptions extends ProcessOptions {
  /**
   * Called after the commit that recorded a backfill request (`event_backfill_requests`), with the
   * request's id, endpoint and window. The event backfill is connected here (see README, "Thin events").
   */
  onBackfillRequested?: (request: { id: number; endpoint: string; window: BackfillWindow }) => void;
}

/**
 * Processes a claimed row that must be read from Stripe first (a thin notification, or a classic event
 * of a refetch endpoint): reads it with `fetcher` OUTSIDE any transaction (no row lock is held while
 * waiting on the network), then in one transaction re-checks the row `FOR UPDATE` and applies what was
 * read: the Stripe handler of the mapped type on the object's current state (with the change claim of
 * change-once.ts), a backfill request, or settles it as `object_missing` / `ignored`. An API failure that
 * outlasted the fetcher's retries defers the row (due again after the worker's backoff, its attempt
 * given back, `last_error` set): a 429 storm delays rows and never parks them. Other failures are
 * recorded like the worker's ({@link recordFailure}). Never throws for handler or API errors.
 * A fetch that outlives the claim's lease is safe: another worker may claim the row meanwhile, and
 * whichever applies first settles it; the other finds it settled at the `FOR UPDATE` re-check (and the
 * change claim would stop a second effect anyway).
 */
export async function processFetched(
  db: Db,
  claim: Claim,
  fetcher: Fetcher,
  options: FetchedOptions,
): Promise<{ outcome: FetchedOutcome; error?: string }> {
  let resolution: Resolution;
  try {
    if (claim.refusal) throw new PermanentError(claim.refusal);
    const payload = claim.payload ?? (await storedPayload(db, claim));
    if (!payload) return { outcome: "skipped" };
    resolution = await fetcher.resolve({ ...claim, payload });
  } catch (err) {
    const error = describeError(err);
    if (retryableStripeError(err) !== undefined) {
      await deferClaim(db, claim, `Stripe API unavailable, retried later without using an attempt: ${error}`, options);
      return { outcome: "deferred", error };
    }
    const parked = await recordFailure(db, claim, error, isPermanent(err) || isFinalApiError(err), options);
    return { outcome: parked ? "needs_review" : "failed", error };
  }
  try {
    const applied = await db.begin(async (tx) => {
      await tx`select set_config('statement_timeout', ${String(options.timeoutMs)}, true)`;
      if (!(await lockUnsettled(tx, claim))) return { outcome: "skipped" as const };
      return settle(tx, claim, resolution, options);
    });
    if (applied.backfill) options.onBackfillRequested?.(applied.backfill);
    return { outcome: applied.outcome, ...(applied.error ? { error: applied.error } : {}) };
  } catch (err) {
    const error = describeError(err);
    const parked = await recordFailure(db, claim, error, isPermanent(err), options);
    return { outcome: parked ? "needs_review" : "failed", error };
  }
}

type Settled = { outcome: FetchedOutcome; error?: string; backfill?: { id: number; endpoint: string; window: BackfillWindow } };

/** Applies `resolution` to the locked row and settles it, inside `tx`. */
async function settle(tx: Tx, claim: Claim, resolution: Resolution, options: FetchedOptions): Promise<Settled> {
  switch (resolution.kind) {
    case "apply": {
      const found = options.handlersFor("stripe", claim.endpoint)?.[resolution.eventType];
      // A thin row always claims its change (its snapshot_event): the classic twin may come, or have come, too.
      const handler = found && claim.provider === "stripe-thin" ? changeOnce(`changeOnce ${resolution.eventType}`, found) : found;
      if (!handler) {
        await markSettled(tx, claim, "ignored", null);
        return { outcome: "ignored" };
      }
      await handler(tx, resolution.object, {
        provider: claim.provider,
        endpoint: claim.endpoint,
        eventId: claim.eventId,
        eventType: resolution.eventType,
        changeId: resolution.changeId,
      });
      await markSettled(tx, claim, "processed", null);
      return { outcome: "processed" };
    }
    case "missing":
      await markSettled(tx, claim, "object_missing", resolution.error);
      return { outcome: "object_missing", error: resolution.error };
    case "ignored":
      await markSettled(tx, claim, "ignored", null);
      return { outcome: "ignored" };
    case "backfill": {
      const id = await recordBackfillRequest(tx, {
        endpoint: claim.endpoint,
        requestedBy: claim.eventId,
        start: resolution.window.start,
        end: resolution.window.end,
      });
      await markSettled(tx, claim, "processed", null);
      return {
        outcome: "processed",
        ...(id !== undefined ? { backfill: { id, endpoint: claim.endpoint, window: resolution.window } } : {}),
      };
    }
  }
}

/** The stored payload of a claim that came without one; undefined when the row is settled. */
async function storedPayload(db: Db, claim: Claim): Promise<Record<string, unknown> | undefined> {
  const [row] = await db<{ payload: Record<string, unknown> | null }[]>`
    select payload
      from webhook_inbox
     where (provider, endpoint, event_id) = (${claim.provider}, ${claim.endpoint}, ${claim.eventId})
       and processed_at is null
  `;
  if (!row) return undefined;
  if (!row.payload) throw new PermanentError("Cannot fetch for an event stored without a payload; resolve it by hand");
  return row.payload;
}

async function markSettled(tx: Tx, claim: Claim, outcome: "processed" | "ignored" | "object_missing", note: string | null): Promise<void> {
  await tx`
    update webhook_inbox
       set processed_at = now(),
           outcome = ${outcome},
           last_error = ${note}
     where (provider, endpoint, event_id) = (${claim.provider}, ${claim.endpoint}, ${claim.eventId})
  `;
}

/** A 4xx from the API other than 404/409/429 (a wrong key, a refused request): no retry helps. */
function isFinalApiError(err: unknown): boolean {
  const status = (err as { statusCode?: unknown } | null)?.statusCode;
  return typeof status === "number" && status >= 400 && status < 500 && status !== 404 && status !== 409 && status !== 429;
}

/**
 * Makes a claimed row due again after the worker's backoff for its attempt count, gives the attempt back
 * and keeps `error` in `last_error`, fenced by the claim's attempt number (a row claimed again or settled
 * meanwhile is left alone). For failures of the API, not of the row.
 */
export async function deferClaim(db: Db, claim: Claim, error: string, options: Pick<ProcessOptions, "backoff">): Promise<boolean> {
  const rows = await db`
    update webhook_inbox
       set attempts = attempts - 1,
           last_error = ${error.slice(0, 1000)},
           available_at = now() + webhook_inbox_backoff(greatest(attempts, 1), ${options.backoff.baseMs}, ${options.backoff.capMs})
     where (provider, endpoint, event_id) = (${claim.provider}, ${claim.endpoint}, ${claim.eventId})
       and attempts = ${claim.attempt}
       and processed_at is null
       and needs_review_at is null
  `;
  return rows.count === 1;
}
