import { isDatabaseUnavailable, isDataError, isPermanent, type Db } from "../db/db.ts";
import { describeError, PermanentError } from "../errors.ts";
import type { HandlerTable } from "../handlers/handler-table.ts";
import { applyEvent, applyEvents, type Applied, type ApplyInput } from "../inbox/apply-event.ts";
import { inboxRow, insertInbox, keyText, rawOnlyRow, recordUnapplied, type Backoff } from "../inbox/inbox.ts";
import { notifierFor } from "../inbox/notifier.ts";
import { keepPartitionsAfterSpill } from "../inbox/partitions.ts";
import type { VerifiedEvent } from "../providers/provider.ts";

/**
 * The result of one delivery, returned as a value (all are 2xx). `ignored_mode`: the event's
 * `livemode` is not its endpoint's mode ({@link recordIgnoredMode}).
 */
export type Outcome = "processed" | "duplicate" | "ignored" | "queued" | "needs_review" | "ignored_mode";

/** How an endpoint processes: in the request (`sync`), by a worker (`async`), or in the request with a worker as fallback (`hybrid`). */
export type Mode = "sync" | "async" | "hybrid";

/** Where an event is received: the inbox key's provider and endpoint, and the endpoint's handler table. */
export interface ReceiveTarget {
  provider: string;
  endpoint: string;
  handlers: HandlerTable;
}

/** Default time bound of a delivery's transaction, ms (`STATEMENT_TIMEOUT_MS`). */
export const DEFAULT_STATEMENT_TIMEOUT_MS = 10_000;

/**
 * Sync mode (seed §5.3): records the event and applies its handler in one transaction
 * ({@link applyEvent}): `processed`, `ignored` (no handler: recorded settled, so a redelivery is a
 * duplicate) or `duplicate` (the key was already recorded, or a concurrent delivery committed it
 * first). `timeoutMs` bounds each statement on the server (lock waits included). `traceparent`: the
 * W3C trace context of the span applying it, given to the outbox rows its handler writes.
 * @throws whatever the handler or the database threw, after the rollback: nothing of the attempt
 *   remains, so the provider's retry processes it again.
 */
export function receiveSync(
  db: Db,
  target: ReceiveTarget,
  event: VerifiedEvent,
  timeoutMs = DEFAULT_STATEMENT_TIMEOUT_MS,
  traceparent?: string,
): Promise<Applied> {
  return applyEvent(db, { ...applyInput(target, event), hold: { insert: event }, timeoutMs, traceparent });
}

/**
 * Async mode (seed §6), one delivery: records the event unprocessed for a worker (`queued`; types
 * without a handler are recorded `ignored` at once) or finds it recorded (`duplicate`); workers are
 * woken after the commit. The receiver's own async path records concurrent deliveries together
 * (group-commit.ts); this is the same insert for one event (backfill, tests).
 * @throws the database error (nothing was recorded).
 */
export function receiveAsync(
  db: Db,
  target: ReceiveTarget,
  event: VerifiedEvent,
  timeoutMs = DEFAULT_STATEMENT_TIMEOUT_MS,
): Promise<Applied> {
  return applyEvent(db, { ...applyInput(target, event), hold: { insert: event, queue: true }, timeoutMs });
}

/** Settings of {@link receiveHybrid}. */
export interface HybridOptions {
  /** Time bound of the in-request attempt, ms (each statement, on the server). */
  budgetMs: number;
  backoff: Backoff;
  /** W3C trace context of the span applying the event (see {@link receiveSync}). */
  traceparent?: string;
}

/**
 * Hybrid mode: applies in the request like {@link receiveSync} with `budgetMs` as its bound; when the
 * attempt fails (the handler threw, or a statement ran past the budget) it rolls back and the event is
 * recorded unprocessed for the worker with `attempts = 1`, `last_error` and the first backoff (`queued`),
 * or parked at once when the failure is permanent (`needs_review`), see {@link recordUnapplied}.
 * `onFallback` receives the error that caused the fallback (for logging).
 * @throws when the database is unavailable, or the fallback record cannot be written either: the
 *   caller answers 5xx and nothing was acknowledged.
 */
export async function receiveHybrid(
  db: Db,
  target: ReceiveTarget,
  event: VerifiedEvent,
  options: HybridOptions,
  onFallback?: (err: unknown) => void,
): Promise<Outcome> {
  try {
    return await receiveSync(db, target, event, options.budgetMs, options.traceparent);
  } catch (err) {
    if (isDatabaseUnavailable(err)) throw err;
    onFallback?.(err);
    return recordFallback(db, target, event, err, options.backoff);
  }
}

/**
 * Records an event whose attempt failed, in its own short statement: parked as needs-review when the
 * failure is permanent ({@link isPermanent}: `needs_review`), else queued for the worker with its first
 * backoff (`queued`); `duplicate` when the key was recorded meanwhile.
 * @throws the database error when the row cannot be written: the caller must answer 5xx.
 */
export async function recordFallback(
  db: Db,
  target: ReceiveTarget,
  event: VerifiedEvent,
  err: unknown,
  backoff: Backoff,
): Promise<Outcome> {
  const parked = isPermanent(err);
  const key = { provider: target.provider, endpoint: target.endpoint, eventId: event.id };
  if (!(await recordUnapplied(db, key, event, { error: describeError(err), parked, backoff }))) return "duplicate";
  return parked ? "needs_review" : "queued";
}

/**
 * Records an event whose `livemode` is not its endpoint's mode (a Connect endpoint receives test and
 * live events with one secret: docs/stripe-connect.md): settled at once with outcome `ignored_mode`,
 * its handler never run (no business row, no outbox row), in one autocommit statement, so it is counted
 * per endpoint and a redelivery is a `duplicate`. Returns `ignored_mode`, or `duplicate` when the key
 * was recorded already (whatever it was recorded as).
 * @throws the database error (nothing was recorded: the caller answers 5xx).
 */
export async function recordIgnoredMode(
  db: Db,
  target: Pick<ReceiveTarget, "provider" | "endpoint">,
  event: VerifiedEvent,
): Promise<Outcome> {
  const key = { provider: target.provider, endpoint: target.endpoint, eventId: event.id };
  const inserted = await insertInbox(db, [inboxRow(key, event, "ignored_mode")]);
  keepPartitionsAfterSpill(db, inserted);
  return inserted.size === 1 ? "ignored_mode" : "duplicate";
}

/** Why an endpoint must not apply an event ({@link refusalOf}): its mode, or its account with the reason for `last_error`. */
export type Refusal = { kind: "mode" } | { kind: "account"; reason: string };

/**
 * Why an endpoint must not apply `event`, or undefined: the one rule for a webhook delivery
 * (receiver/app.ts) and an event read from the Events API (reconcile/record-page.ts).
 * - `mode` when the endpoint has a mode (`livemode` defined) and the event's `livemode` is not it (a
 *   missing one included: it cannot be shown to be the endpoint's): recorded `ignored_mode`.
 * - `account` when the event belongs to a connected account (`account` not `""`), the endpoint is not
 *   declared Connect (`STRIPE_CONNECT[_<NAME>]`) and it handles the event's type: parked, with the
 *   reason for the inbox row's last_error. A type it does not handle is recorded `ignored` like any
 *   other (nothing would be applied). Stripe docs, "Connect webhooks"; docs/stripe-connect.md.
 */
export function refusalOf(
  endpoint: { name: string; livemode?: boolean; connect?: boolean; handlers: HandlerTable },
  event: Pick<VerifiedEvent, "account" | "livemode" | "type">,
): Refusal | undefined {
  if (endpoint.livemode !== undefined && event.livemode !== endpoint.livemode) return { kind: "mode" };
  if ((event.account ?? "") !== "" && !endpoint.connect && Object.hasOwn(endpoint.handlers, event.type))
    return {
      kind: "account",
      reason:
        `Event of connected account ${event.account} at endpoint ${endpoint.name}, which is not declared Connect: not applied ` +
        "(set STRIPE_CONNECT for this endpoint to apply connected accounts' events, then requeue it; or resolve it)",
    };
  return undefined;
}

/**
 * Records an event {@link refusalOf} refused, never applying it: `mode` as `ignored_mode`
 * ({@link recordIgnoredMode}), `account` parked as needs-review with the reason ({@link recordFallback}
 * with a PermanentError). Returns that outcome, or `duplicate` when the key was recorded already.
 * @throws the database error (nothing was recorded).
 */
export function recordRefusal(db: Db, target: ReceiveTarget, event: VerifiedEvent, refusal: Refusal, backoff: Backoff): Promise<Outcome> {
  if (refusal.kind === "mode") return recordIgnoredMode(db, target, event);
  return recordFallback(db, target, event, new PermanentError(refusal.reason), backoff);
}

/** The key, handler table, type, object and account of a received event, for {@link applyEvent}. */
function applyInput(target: ReceiveTarget, event: VerifiedEvent) {
  return {
    key: { provider: target.provider, endpoint: target.endpoint, eventId: event.id },
    handlers: target.handlers,
    type: event.type,
    object: event.subject.object,
    account: event.account ?? "",
  };
}

/**
 * The events of ONE delivery that carries several (Adyen's batch: `WebhookProvider.verifyAll`),
 * recorded together; returns each event's outcome in the order given. Events are handled in key order
 * (so two batches holding the same keys queue instead of deadlocking), one key once.
 * - `sync`: every inbox row and every handler's writes in ONE transaction ({@link applyEvents}). When a
 *   handler fails permanently ({@link isPermanent}), the whole transaction is tried again with that
 *   event recorded needs-review instead of applied (`needs_review`), as the one-event path parks it.
 * - `hybrid`: the same transaction bounded by `hybrid.budgetMs`; when it fails, ONE transaction
 *   records them all for the worker: the event that failed with its error and first backoff (parked at
 *   once when permanent: `needs_review`), the others queued (`queued`).
 * - `async`: ONE insert statement records them all, unprocessed (`queued`) or, without a handler, `ignored`.
 * An event whose own row PostgreSQL refuses (a data error: a payload jsonb refuses even sanitized, a
 * creation time beyond timestamptz's range) is kept as its raw body, parked (`needs_review`), in the same
 * transaction as the others (inbox.ts `rawOnlyRow`), as a single event is kept (recordUnapplied): the
 * sender gets its 2xx and nothing is lost. Only an event whose key itself is refused (a NUL in its id)
 * still refuses the delivery (the caller answers 400 `invalid_event`).
 * `duplicate` for an event already recorded. Nothing is acknowledged before the commit.
 * @throws the handler's or the database's error after the rollback (nothing of the delivery remains),
 *   when the database is unavailable, or when the fallback cannot be written: the caller answers 5xx.
 */
export async function receiveBatch(
  db: Db,
  target: ReceiveTarget,
  events: readonly VerifiedEvent[],
  options: { mode: Mode; timeoutMs: number; hybrid: HybridOptions },
): Promise<Outcome[]> {
  const order = events.map((e, i) => ({ e, i })).sort((a, b) => (a.e.id < b.e.id ? -1 : a.e.id > b.e.id ? 1 : a.i - b.i));
  const sorted = order.map((o) => o.e);
  const outcomes = await receiveSorted(db, target, sorted, options);
  const result: Outcome[] = new Array<Outcome>(events.length);
  order.forEach((o, k) => (result[o.i] = outcomes[k] as Outcome));
  return result;
}

async function receiveSorted(
  db: Db,
  target: ReceiveTarget,
  events: readonly VerifiedEvent[],
  options: { mode: Mode; timeoutMs: number; hybrid: HybridOptions },
): Promise<Outcome[]> {
  if (options.mode === "async") {
    try {
      return await recordBatchQueued(db, target, events);
    } catch (err) {
      // One statement cannot say which row PostgreSQL refused: record them in one transaction, which can.
      if (!isDataError(err)) throw err;
    }
  }
  return recordBatch(db, target, events, options);
}

/**
 * Sync and hybrid batches, and async ones holding a row PostgreSQL refuses: ONE transaction, tried
 * again with what each failure taught (at most twice per event):
 * - `failures`: events recorded with their error instead of applied (parked when permanent);
 * - `raw`: events whose own row PostgreSQL refused (a data error while only recording it): kept as
 *   their raw body, parked (inbox.ts `rawOnlyRow`), so the rest of the delivery is recorded and the
 *   sender gets its 2xx, as a single event is kept (recordUnapplied);
 * - `recordOnly`: after hybrid's in-request attempt failed, or in async mode: nothing is applied, every
 *   other event is queued for the worker (`failAll` when the failure named no event: each gets it).
 */
async function recordBatch(
  db: Db,
  target: ReceiveTarget,
  events: readonly VerifiedEvent[],
  options: { mode: Mode; timeoutMs: number; hybrid: HybridOptions },
): Promise<Outcome[]> {
  const failures = new Map<number, unknown>();
  const raw = new Set<number>();
  let recordOnly = options.mode === "async";
  let failAll: unknown;
  const { backoff } = options.hybrid;
  const why = (i: number) => (failures.has(i) ? failures.get(i) : failAll);
  const holdOf = (e: VerifiedEvent, i: number): ApplyInput["hold"] => {
    const key = { provider: target.provider, endpoint: target.endpoint, eventId: e.id };
    if (raw.has(i)) return { insert: e, row: rawOnlyRow(key, e, describeError(why(i)), backoff) };
    if (why(i) !== undefined) return { insert: e, failed: { error: describeError(why(i)), parked: isPermanent(why(i)), backoff } };
    return recordOnly ? { insert: e, queue: true } : { insert: e };
  };
  for (;;) {
    let failedAt: number | undefined;
    const bound = recordOnly || options.mode === "sync" ? options.timeoutMs : options.hybrid.budgetMs;
    const inputs = events.map((e, i): ApplyInput => ({ ...applyInput(target, e), hold: holdOf(e, i), timeoutMs: bound }));
    try {
      const applied = await applyEvents(db, inputs, bound, (i) => (failedAt = i));
      return applied.map((a, i) => (a === "queued" && (raw.has(i) || isPermanent(why(i))) ? "needs_review" : a));
    } catch (err) {
      if (isDatabaseUnavailable(err)) throw err;
      // Its hold ran no handler: PostgreSQL refused the event's row itself. Kept raw, unless that was refused too (its key).
      const onlyRecorded = failedAt !== undefined && (recordOnly || failures.has(failedAt));
      if (failedAt !== undefined && onlyRecorded && isDataError(err) && !raw.has(failedAt)) {
        raw.add(failedAt);
        if (!failures.has(failedAt)) failures.set(failedAt, err);
        continue;
      }
      if (recordOnly) throw err;
      if (options.mode === "sync") {
        if (failedAt === undefined || !isPermanent(err) || failures.has(failedAt)) throw err;
        failures.set(failedAt, err);
        continue;
      }
      // Hybrid: record them all for the worker, the event that failed with its error and first backoff.
      recordOnly = true;
      if (failedAt === undefined) failAll = err;
      else failures.set(failedAt, err);
    }
  }
}

/** Async mode for a batch: one autocommit insert of every event, queued for a worker or `ignored`; workers woken after it. */
async function recordBatchQueued(db: Db, target: ReceiveTarget, events: readonly VerifiedEvent[]): Promise<Outcome[]> {
  const handled = (e: VerifiedEvent) => Object.hasOwn(target.handlers, e.type);
  const keyOf = (e: VerifiedEvent) => ({ provider: target.provider, endpoint: target.endpoint, eventId: e.id });
  const first = new Map<string, VerifiedEvent>();
  for (const e of events) if (!first.has(keyText(keyOf(e)))) first.set(keyText(keyOf(e)), e);
  const inserted = await insertInbox(
    db,
    [...first.values()].map((e) => inboxRow(keyOf(e), e, handled(e) ? null : "ignored")),
  );
  const outcomes = events.map((e): Outcome => {
    const text = keyText(keyOf(e));
    if (first.get(text) !== e || !inserted.has(text)) return "duplicate";
    return handled(e) ? "queued" : "ignored";
  });
  if (outcomes.includes("queued")) notifierFor(db).wake();
  keepPartitionsAfterSpill(db, inserted);
  return outcomes;
}
