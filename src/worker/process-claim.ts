import { isPermanent, type Db } from "../db/db.ts";
import { within } from "../db/sleep.ts";
import { describeError, PermanentError } from "../errors.ts";
import type { HandlerTable } from "../handlers/handler-table.ts";
import { applyEvent } from "../inbox/apply-event.ts";
import { keyIs, type Backoff } from "../inbox/inbox.ts";
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
 * `object_missing` (Stripe no longer has the object it points to: settled).
 */
export type WorkOutcome = "processed" | "ignored" | "skipped" | "failed" | "needs_review" | "deferred" | "object_missing";

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
 * On failure the transaction rolls back and {@link recordFailure} stores the error and the next
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
  const ingest = spanContextOf(claim.traceparent);
  const spec = {
    name: `process ${claim.endpoint}`,
    kind: t.api.SpanKind.CONSUMER,
    attributes: {
      ...messagingAttributes(claim.provider, claim.endpoint, claim.eventId, claim.eventType, "process"),
      "webhook_inbox.attempt": claim.attempt,
    },
    links: ingest ? [{ context: ingest }] : [],
  };
  return inSpan(t, spec, async (span, context) => {
    const result = await processUntraced(db, claim, options, traceparentOf(t, span), context);
    span?.setAttribute("webhook_inbox.outcome", result.outcome);
    if (result.error !== undefined) span?.setStatus({ code: t.api.SpanStatusCode.ERROR, message: result.error.slice(0, 300) });
    const ids = span?.spanContext();
    return ids && t.api.isSpanContextValid(ids) ? { ...result, traceId: ids.traceId, spanId: ids.spanId } : result;
  });
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
    return failed(db, claim, err, options, false);
  }
}

async function failed(db: Db, claim: Claim, err: unknown, options: ProcessOptions, final: boolean, described?: string) {
  const error = described ?? describeError(err);
  const parked = await recordFailure(db, claim, error, isPermanent(err) || final, options);
  return { outcome: parked ? ("needs_review" as const) : ("failed" as const), error };
}

/** An API read that did not end before the claim's budget (its lease minus the transaction's bound). */
class ReadTooSlow extends Error {
  override name = "ReadTooSlow";
}

/**
 * Records a failed attempt after its rollback, in its own short statement (graphile-worker's
 * `failJobs`): `last_error`, `available_at` pushed out by the SQL backoff, and needs-review when the
 * error is permanent or the attempt limit is reached. Touches the row only while it is unprocessed
 * and still carries this claim's attempt number (the fencing token), so it never disturbs a row
 * another worker finished or re-claimed. Returns true when the row is now needs-review.
 */
export async function recordFailure(
  db: Db,
  claim: Claim,
  error: string,
  permanent: boolean,
  options: Pick<ProcessOptions, "maxAttempts" | "backoff">,
): Promise<boolean> {
  const [row] = await db<{ parked: boolean }[]>`
    update webhook_inbox
       set last_error = ${error},
           available_at = now() + webhook_inbox_backoff(attempts, ${options.backoff.baseMs}, ${options.backoff.capMs}),
           needs_review_at = case when ${permanent} or attempts >= ${options.maxAttempts} then now() end
     where ${keyIs(db, claim)}
       and processed_at is null
       and attempts = ${claim.attempt}
    returning needs_review_at is not null as parked
  `;
  return row?.parked ?? false;
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
