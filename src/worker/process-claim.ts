import { isPermanent, type Db, type Tx } from "../db/db.ts";
import { within } from "../db/sleep.ts";
import { describeError, PermanentError } from "../errors.ts";
import type { HandlerTable } from "../handlers/handler-table.ts";
import { applyEvent } from "../inbox/apply-event.ts";
import { keyIs, type Backoff } from "../inbox/inbox.ts";
import { EndpointPaused } from "../inbox/pauses.ts";
import { storedEvent } from "../inbox/stored-event.ts";
import { subjectOf } from "../providers/registry.ts";
import { retryableStripeError } from "../stripe-api/retry.ts";
import type { Claim } from "./claim.ts";
import type { Context } from "@opentelemetry/api";
import { inSpan, messagingAttributes, spanContextOf, traceparentOf, type Telemetry } from "../telemetry.ts";
import type { Fetcher, Resolution } from "./stripe-fetch.ts";

/**
 * What one claimed row came to: `skipped` (another worker or a redelivery had settled it meanwhile),
 * `deferred` (the Stripe API did not answer in time: due again later, no attempt used),
 * `object_missing` (Stripe no longer has the object it points to: settled), `released` (not started:
 * its batch's time, or its lease, ran out first; its attempt given back, due again at once), `held` (its
 * endpoint or account was paused after the claim: nothing applied, its attempt given back; claimed
 * again after `resume`).
 */
export type WorkOutcome =
  "processed" | "ignored" | "skipped" | "failed" | "needs_review" | "deferred" | "object_missing" | "released" | "held";

/** Deferrals in a row after which a thin or refetch row is parked as needs-review (about 2 h with the default backoff). */
export const MAX_DEFERS = 24;

/** Settings of {@link processClaim}; times in ms. */
export interface ProcessOptions {
  /** Handler tables by inbox provider (the claim picked only rows of these providers). */
  tables: Readonly<Record<string, HandlerTable>>;
  /** The claim's bound: PostgreSQL's `statement_timeout` in its transaction (`WORKER_TIMEOUT_MS`); an API read must end `timeoutMs` before the lease does. */
  timeoutMs: number;
  maxAttempts: number;
  backoff: Backoff;
  /** Reads what thin rows and refetch endpoints' rows are about (stripe-fetch.ts). */
  fetcher?: Fetcher;
  /**
   * OpenTelemetry (src/telemetry.ts): a `process <endpoint>` span per claim, linked to the span that
   * recorded the row (its stored traceparent), with the API read as a child `GET <object type>` span.
   */
  telemetry?: Telemetry;
}

/**
 * Processes one claimed row (seed §6 `process_claimed`):
 * - a row that must be read from Stripe first (a thin notification, a refetch endpoint's event) whose
 *   type has a handler is read with the fetcher OUTSIDE any transaction (no row lock held while waiting
 *   on the network), ending at least `timeoutMs` before the claim's lease does, so the read and the
 *   transaction end inside the lease; a read that fails for a reason a later try can fix (429, 409, 5xx, no answer in
 *   time) defers the row: due again after a backoff that grows with its deferrals, its attempt given
 *   back, parked as needs-review after {@link MAX_DEFERS} in a row;
 * - then the row's handler runs through {@link applyEvent} (`FOR UPDATE` re-check, handler, settle,
 *   one transaction bounded by `timeoutMs` on the server) on the stored event's object or the object read.
 * On failure the transaction rolls back and {@link recordFailures} stores the error and the next
 * attempt time (parked at once when permanent). Returns the outcome, the error text on failure and
 * the fetcher's note when the row was applied from a read (a health notification's: what was read,
 * which window is backfilled and why);
 * never throws for handler or API errors. A failure to record the failure is thrown (the lease then
 * expires and the row is claimed again).
 */
export async function processClaim(
  db: Db,
  claim: Claim,
  options: ProcessOptions,
): Promise<{ outcome: WorkOutcome; error?: string; note?: string; traceId?: string; spanId?: string }> {
  const t = options.telemetry;
  if (!t) return processUntraced(db, claim, options);
  return inSpan(t, claimSpanSpec(t, claim), async (span, context) => {
    const result = await processUntraced(db, claim, options, traceparentOf(t, span), context);
    span?.setAttribute("webhook_inbox.outcome", result.outcome);
    if (result.error !== undefined) span?.setStatus({ code: t.api.SpanStatusCode.ERROR, message: result.error.slice(0, 300) });
    const ids = span?.spanContext();
    return ids && t.api.isSpanContextValid(ids) ? { ...result, traceId: ids.traceId, spanId: ids.spanId } : result;
  });
}

/**
 * The span of one claimed row's processing (OpenTelemetry messaging semantic conventions, "process"):
 * `process <endpoint>`, kind CONSUMER, the event's messaging attributes and its attempt, linked to the
 * span that recorded the row (its stored traceparent) when there was one.
 */
export function claimSpanSpec(t: Telemetry, claim: Claim) {
  const ingest = spanContextOf(claim.traceparent);
  return {
    name: `process ${claim.endpoint}`,
    kind: t.api.SpanKind.CONSUMER,
    attributes: {
      ...messagingAttributes(claim.provider, claim.endpoint, claim.eventId, claim.eventType, "process"),
      "webhook_inbox.attempt": claim.attempt,
    },
    links: ingest ? [{ context: ingest }] : [],
  };
}

async function processUntraced(
  db: Db,
  claim: Claim,
  options: ProcessOptions,
  traceparent?: string,
  traced?: Context,
): Promise<{ outcome: WorkOutcome; error?: string; note?: string }> {
  let input: { object: Record<string, unknown>; changeId?: string };
  let note: string | undefined;
  const handlers = options.tables[claim.provider] ?? {};
  try {
    if (claim.refusal) throw new PermanentError(claim.refusal);
    // runWorker claims only rows of its tables' providers; a caller that claimed another is told so.
    if (!Object.hasOwn(options.tables, claim.provider))
      throw new PermanentError(`No handler table for provider ${claim.provider} (endpoint ${claim.endpoint}) in this worker`);
    const stored = storedEvent(claim.payload, claim.rawBody);
    const handled = Object.hasOwn(handlers, claim.eventType);
    if (handled && options.fetcher?.needsFetch(claim)) {
      let read: Resolution;
      try {
        const fetcher = options.fetcher;
        const handles = (type: string) => Object.hasOwn(handlers, type);
        const reading = {
          name: `GET ${claim.provider} object`,
          kind: options.telemetry?.api.SpanKind.CLIENT,
          parent: traced,
          attributes: { "messaging.message.id": claim.eventId },
        };
        read = await inSpan(options.telemetry, reading, () => {
          const ms = claim.leaseEndsAt - options.timeoutMs - Date.now();
          const late = () => new ReadTooSlow(`the Stripe API read did not end within the lease (${Math.max(0, ms)} ms left)`);
          return within(fetcher.resolve({ ...claim, payload: stored.payload }, handles), ms, late); // the HTTP request runs on, ignored
        });
      } catch (err) {
        if (isPermanent(err) || (retryableStripeError(err) === undefined && !(err instanceof ReadTooSlow))) throw err;
        return await deferClaim(
          db,
          claim,
          `Stripe API unavailable, retried later without using an attempt: ${options.fetcher.describeFailure?.(err) ?? describeError(err)}`,
          options,
        );
      }
      if (read.kind === "missing") return await settleMissing(db, claim, read.error);
      input = { object: read.object, changeId: read.changeId };
      note = read.note;
    } else {
      input = { object: subjectOf(claim.provider, stored.payload).object };
    }
  } catch (err) {
    // An API error is worded without Stripe's own message, which quotes the key masked to its last characters.
    return failed(db, claim, err, options, isFinalApiError(err), options.fetcher?.describeFailure?.(err));
  }
  try {
    const applied = await applyEvent(db, {
      key: claim,
      handlers,
      type: claim.eventType,
      object: input.object,
      changeId: input.changeId,
      account: claim.account,
      hold: { claimed: true },
      timeoutMs: options.timeoutMs,
      traceparent,
    });
    // A claimed row is processed, ignored, or found settled by someone else (never queued).
    return { outcome: applied === "duplicate" ? "skipped" : (applied as "processed" | "ignored"), ...(note ? { note } : {}) };
  } catch (err) {
    if (err instanceof EndpointPaused) {
      await recordFailures(db, [{ claim, release: true }], options);
      return { outcome: "held", error: err.message };
    }
    return failed(db, claim, err, options, false);
  }
}

async function failed(db: Db, claim: Claim, err: unknown, options: ProcessOptions, final: boolean, described?: string) {
  const error = described ?? describeError(err);
  const [parked] = await recordFailures(db, [{ claim, error, permanent: isPermanent(err) || final }], options);
  return { outcome: parked ? ("needs_review" as const) : ("failed" as const), error };
}

/** An API read that did not end before the claim's budget (its lease minus the transaction's bound). */
class ReadTooSlow extends Error {
  override name = "ReadTooSlow";
}

/**
 * One claimed row for {@link recordFailures}: a failed attempt (`error`, parked at once when
 * `permanent`), or with `release` an attempt not made (the batch's time ran out before it, too little
 * of its lease was left to start it, or its endpoint was paused meanwhile): given back and due again now.
 */
export interface AttemptRecord {
  claim: Pick<Claim, "provider" | "endpoint" | "eventId" | "attempt">;
  error?: string;
  permanent?: boolean;
  release?: boolean;
}

/**
 * Records what became of claimed rows that were not settled, in ONE statement (graphile-worker's
 * `failJobs`), on `sql` (the pool after a rollback, or a batch's own transaction): a failure stores
 * `last_error`, pushes `available_at` out by the SQL backoff of the attempts used
 * (`webhook_inbox_backoff`, sql/0003) and parks the row as needs-review when the error is permanent or
 * the attempt limit is reached; a release gives the attempt back (`attempts - 1`) and makes the row due
 * now. Touches a row only while it is unprocessed and still carries its claim's attempt number (the
 * fencing token), so it never disturbs a row another worker finished or re-claimed. Returns, for each
 * record in order, whether its row is now needs-review.
 */
export async function recordFailures(
  sql: Db | Tx,
  records: readonly AttemptRecord[],
  options: Pick<ProcessOptions, "maxAttempts" | "backoff">,
): Promise<boolean[]> {
  if (records.length === 0) return [];
  const rows = records.map((r, i) => ({
    i,
    provider: r.claim.provider,
    endpoint: r.claim.endpoint,
    event_id: r.claim.eventId,
    attempt: r.claim.attempt,
    error: r.error ?? null,
    permanent: r.permanent === true,
    release: r.release === true,
  }));
  const updated = await sql<{ i: number; parked: boolean }[]>`
    update webhook_inbox w
       set last_error = case when r.release then w.last_error else r.error end,
           attempts = w.attempts - case when r.release then 1 else 0 end,
           available_at = now() + case when r.release then interval '0 s'
                                       else webhook_inbox_backoff(w.attempts, ${options.backoff.baseMs}, ${options.backoff.capMs}) end,
           needs_review_at = case when not r.release and (r.permanent or w.attempts >= ${options.maxAttempts}) then now() end
      from jsonb_to_recordset(${sql.json(rows)}) as r(i int, provider text, endpoint text, event_id text, attempt int, error text, permanent boolean, release boolean)
     where (w.provider, w.endpoint, w.event_id) = (r.provider, r.endpoint, r.event_id)
       and w.processed_at is null
       and w.attempts = r.attempt
    returning r.i, w.needs_review_at is not null as parked
  `;
  const isParked = new Set(updated.filter((u) => u.parked).map((u) => u.i));
  return records.map((_, i) => isParked.has(i));
}

/**
 * Defers a claimed row whose API read failed for a reason of the API, not of the row: its attempt is
 * given back, `defers` counts up, and it is due again after `webhook_inbox_backoff(defers)` (so the
 * wait grows: 1 s, 2 s, … up to the backoff cap); after {@link MAX_DEFERS} deferrals in a row it is
 * parked as needs-review with `error`, for an operator. Fenced by the claim's attempt number.
 */
async function deferClaim(db: Db, claim: Claim, error: string, options: Pick<ProcessOptions, "backoff">) {
  const [row] = await db<{ parked: boolean }[]>`
    update webhook_inbox
       set attempts = attempts - 1,
           defers = defers + 1,
           last_error = left(${error} || case when defers + 1 >= ${MAX_DEFERS} then ' (deferred ' || (defers + 1) || ' times in a row: parked)' else '' end, 1000),
           available_at = now() + webhook_inbox_backoff(defers + 1, ${options.backoff.baseMs}, ${options.backoff.capMs}),
           needs_review_at = case when defers + 1 >= ${MAX_DEFERS} then now() end
     where ${keyIs(db, claim)}
       and attempts = ${claim.attempt}
       and processed_at is null
       and needs_review_at is null
    returning needs_review_at is not null as parked
  `;
  return { outcome: row?.parked ? ("needs_review" as const) : ("deferred" as const), error };
}

/** Settles a claimed row whose object Stripe no longer has (`object_missing`, never retried), fenced by its attempt. */
async function settleMissing(db: Db, claim: Claim, note: string) {
  const rows = await db`
    update webhook_inbox
       set processed_at = now(),
           outcome = 'object_missing',
           last_error = ${note}
     where ${keyIs(db, claim)}
       and attempts = ${claim.attempt}
       and processed_at is null
       and needs_review_at is null
  `;
  return { outcome: rows.count === 1 ? ("object_missing" as const) : ("skipped" as const), error: note };
}

/** A 4xx from the API other than 404/409/429 (a wrong key, a refused request): no retry helps. */
function isFinalApiError(err: unknown): boolean {
  const status = (err as { statusCode?: unknown } | null)?.statusCode;
  return typeof status === "number" && status >= 400 && status < 500 && status !== 404 && status !== 409 && status !== 429;
}
