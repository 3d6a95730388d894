import { isDatabaseUnavailable, isDataError, isPermanent, settleWithin, STUCK_SLACK_MS, type Db, type Tx } from "../db/db.ts";
import { describeError, PermanentError } from "../errors.ts";
import type { HandlerTable } from "../handlers/handler-table.ts";
import { applyEvent, applyEvents, type Applied, type ApplyInput, type Hold } from "../inbox/apply-event.ts";
import { inboxRow, insertInbox, keyText, lockRecorded, rawOnlyRow, recordUnapplied, type Backoff, type InboxKey } from "../inbox/inbox.ts";
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
  const record = async (): Promise<Outcome> => {
    if (await recordUnapplied(db, key, event, { error: describeError(err), parked, backoff })) return parked ? "needs_review" : "queued";
    await lockRecorded(db, [key]);
    return "duplicate";
  };
  return settleWithin(record(), DEFAULT_STATEMENT_TIMEOUT_MS + STUCK_SLACK_MS, "The fallback record");
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
  const record = async (): Promise<Outcome> => {
    const inserted = await insertInbox(db, [inboxRow(key, event, "ignored_mode")]);
    keepPartitionsAfterSpill(db, inserted);
    if (inserted.size === 1) return "ignored_mode";
    await lockRecorded(db, [key]);
    return "duplicate";
  };
  return settleWithin(record(), DEFAULT_STATEMENT_TIMEOUT_MS + STUCK_SLACK_MS, "The ignored_mode record");
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

/**
 * The key, handler table, type, object and account of a received event, for {@link applyEvent}; a
 * delivery found recorded locks its row before it is answered `duplicate` (inbox.ts lockRecorded).
 */
function applyInput(target: ReceiveTarget, event: VerifiedEvent) {
  const key: InboxKey = { provider: target.provider, endpoint: target.endpoint, eventId: event.id };
  return {
    key,
    handlers: target.handlers,
    type: event.type,
    object: event.subject.object,
    account: event.account ?? "",
    after: (tx: Tx, applied: Applied) => (applied === "duplicate" ? lockRecorded(tx, [key]) : Promise.resolve()),
  };
}

/**
 * The events of ONE delivery that carries several (Adyen's batch: `WebhookProvider.verifyAll`),
 * recorded together: `async` by one insert ({@link recordQueued}), `sync` and `hybrid` in one
 * transaction ({@link recordBatch}), answered only after the commit holding every event. Returns each
 * event's outcome in the order given, as one event's in that mode (hybrid's fallback records them all
 * for the worker), `needs_review` for one parked: its handler failed permanently, or PostgreSQL refused
 * its row (a data error), kept as its raw body as recordUnapplied keeps one event.
 * @throws after the rollback (nothing of the delivery remains): the data error of an event whose key
 *   PostgreSQL refuses (a NUL in its id: the caller answers 400), or the handler's or database's error.
 */
export async function receiveBatch(
  db: Db,
  target: ReceiveTarget,
  events: readonly VerifiedEvent[],
  options: { mode: Mode; timeoutMs: number; hybrid: HybridOptions },
): Promise<Outcome[]> {
  if (options.mode === "async") {
    const deliveries = events.map((event) => ({ target, event }));
    // One statement cannot say which row PostgreSQL refused: one transaction can (recordBatch).
    const queued = await recordQueued(db, deliveries, options.timeoutMs).catch((err: unknown) =>
      isDataError(err) ? undefined : Promise.reject(err),
    );
    if (queued) return queued;
  }
  // In key order, so two batches holding the same keys queue instead of deadlocking.
  const id = (i: number) => events[i]!.id;
  const order = events.map((_, i) => i).sort((a, b) => (id(a) < id(b) ? -1 : id(a) > id(b) ? 1 : a - b));
  const sorted = order.map((i) => events[i]!);
  const outcomes = await recordBatch(db, target, sorted, options);
  const result = new Array<Outcome>(events.length);
  order.forEach((i, k) => (result[i] = outcomes[k]!));
  return result;
}

/**
 * What a batch's next attempt does with one event ({@link recordBatch}): apply it, queue it for a worker,
 * record it with an attempt's error (`failed`: parked when permanent), or keep it as its raw body, parked
 * (`raw`: inbox.ts rawOnlyRow). An event only moves forward, apply → queue → failed → raw, so tries end.
 */
type Step = { kind: "apply" } | { kind: "queue" } | { kind: "failed" | "raw"; err: unknown };

/**
 * A batch in ONE transaction ({@link applyEvents}) holding each event as its {@link Step} says; when it
 * rolls back, tried again with the steps {@link nextSteps} gives, until it commits or none is left.
 * THE INVARIANT: outcomes are returned (so `[accepted]` is answered) only after the commit of one
 * transaction holding EVERY event of the delivery, applied, recorded, queued or parked; every other way
 * out throws after a rollback, so nothing is acknowledged and the provider sends it all again.
 */
async function recordBatch(
  db: Db,
  target: ReceiveTarget,
  events: readonly VerifiedEvent[],
  options: { mode: Mode; timeoutMs: number; hybrid: HybridOptions },
  steps: readonly Step[] = events.map(() => ({ kind: options.mode === "async" ? "queue" : "apply" })),
): Promise<Outcome[]> {
  const applying = steps.some((s) => s.kind === "apply");
  const bound = applying && options.mode === "hybrid" ? options.hybrid.budgetMs : options.timeoutMs;
  const hold = (e: VerifiedEvent, i: number) => holdOf(target, e, steps[i]!, options.hybrid.backoff);
  const inputs = events.map((e, i): ApplyInput => ({ ...applyInput(target, e), hold: hold(e, i), timeoutMs: bound }));
  let failedAt: number | undefined;
  try {
    const applied = await applyEvents(db, inputs, bound, (i) => (failedAt = i));
    const parked = (s: Step) => s.kind === "raw" || (s.kind === "failed" && isPermanent(s.err));
    return applied.map((a, i) => (a === "queued" && parked(steps[i]!) ? "needs_review" : a));
  } catch (err) {
    const next = isDatabaseUnavailable(err) ? undefined : nextSteps(steps, err, failedAt, options.mode);
    if (!next) throw err;
    return recordBatch(db, target, events, options, next);
  }
}

/**
 * A batch's steps after an attempt rolled back with `err` at event `at` (undefined: no event's hold or
 * handler threw, the commit did), or undefined when no retry can record the delivery:
 * - an event only recorded whose row PostgreSQL refused (a data error) is kept `raw`; when it was raw
 *   already, PostgreSQL refuses even that (its key): none;
 * - sync: an event whose handler failed permanently is recorded `failed`, the others applied again;
 * - hybrid, while applying: every event is recorded for the worker, the one that failed (none named:
 *   each) `failed`, the others `queue`d;
 * - anything else (a transient failure in sync mode; while only recording, any other error): none.
 */
function nextSteps(steps: readonly Step[], err: unknown, at: number | undefined, mode: Mode): Step[] | undefined {
  const step = at === undefined ? undefined : steps[at];
  const only = (s: Step) => steps.map((old, i) => (i === at ? s : old));
  if (step && step.kind !== "apply" && isDataError(err))
    return step.kind === "raw" ? undefined : only({ kind: "raw", err: step.kind === "failed" ? step.err : err });
  if (!steps.some((s) => s.kind === "apply")) return undefined;
  if (mode === "sync") return step?.kind === "apply" && isPermanent(err) ? only({ kind: "failed", err }) : undefined;
  return steps.map((_, i) => (at === undefined || i === at ? { kind: "failed", err } : { kind: "queue" }));
}

/** The {@link Hold} of a batch's event at `step`. */
function holdOf(target: ReceiveTarget, event: VerifiedEvent, step: Step, backoff: Backoff): Hold {
  if (step.kind === "apply") return { insert: event };
  if (step.kind === "queue") return { insert: event, queue: true };
  const key = applyInput(target, event).key;
  const error = describeError(step.err);
  if (step.kind === "raw") return { record: rawOnlyRow(key, event, error, backoff) };
  return { record: { ...inboxRow(key, event, null), failed: { error, parked: isPermanent(step.err), backoff } } };
}

/** A delivery {@link recordQueued} records: the endpoint it came to and its event. */
export type Delivery = { target: ReceiveTarget; event: VerifiedEvent };

/**
 * Async mode for several events at once (a batch's; group commit's concurrent deliveries): ONE
 * autocommit insert records each key once, in key order (two such statements holding the same keys
 * wait for each other instead of deadlocking), for a worker (`queued`) or, without a handler,
 * `ignored`; the first delivery of a key gets the insert's result, the others and a key already
 * recorded `duplicate`. Returns the outcomes in the order given, after the commit; workers are woken
 * after it, and the payload partitions kept after a spill. An insert that recorded nothing locks the rows
 * it found (inbox.ts lockRecorded), so a `duplicate` is answered only once the synchronous standby, if
 * any, has them. The caller stops waiting after `timeoutMs` + STUCK_SLACK_MS (the statement and its
 * commit, which no `statement_timeout` covers: a commit waiting for a missing synchronous standby), with
 * QUERY_STUCK; the statement is not cancelled, and what it records later is what the retry meets.
 * @throws the database error (nothing was recorded); QUERY_STUCK as above.
 */
export async function recordQueued(db: Db, deliveries: readonly Delivery[], timeoutMs = DEFAULT_STATEMENT_TIMEOUT_MS): Promise<Outcome[]> {
  const keyOf = (d: Delivery) => ({ provider: d.target.provider, endpoint: d.target.endpoint, eventId: d.event.id });
  const handled = (d: Delivery) => Object.hasOwn(d.target.handlers, d.event.type);
  const first = new Map<string, Delivery>();
  for (const d of deliveries) if (!first.has(keyText(keyOf(d)))) first.set(keyText(keyOf(d)), d);
  const rows = [...first].sort(([a], [b]) => (a < b ? -1 : 1)).map(([, d]) => inboxRow(keyOf(d), d.event, handled(d) ? null : "ignored"));
  const record = async () => {
    const inserted = await insertInbox(db, rows);
    // Only when the insert wrote nothing: its commit then waited for no standby (inbox.ts lockRecorded).
    if (inserted.size === 0)
      await lockRecorded(
        db,
        rows.map((r) => r.key),
      );
    return inserted;
  };
  const inserted = await settleWithin(record(), timeoutMs + STUCK_SLACK_MS, "The inbox insert");
  const outcomes = deliveries.map((d): Outcome => {
    const text = keyText(keyOf(d));
    return first.get(text) !== d || !inserted.has(text) ? "duplicate" : handled(d) ? "queued" : "ignored";
  });
  if (outcomes.includes("queued")) notifierFor(db).wake();
  keepPartitionsAfterSpill(db, inserted);
  return outcomes;
}
