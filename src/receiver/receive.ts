import { isDatabaseUnavailable, isDataError, isPermanent, isRetryableConflict, isStrayCancel, type Db } from "../db/db.ts";
import { describeError } from "../errors.ts";
import type { HandlerTable } from "../handlers/handler-table.ts";
import { recordAndApply, recordEvent, recordFailedAttempt, recordUnstorable, type Backoff, type StatementEffect } from "../inbox/inbox.ts";
import { notifierFor, OUTBOX_CHANNEL } from "../inbox/notifier.ts";
import type { VerifiedEvent } from "../providers/provider.ts";

/** The result of one delivery, returned as a value (all are 2xx). */
export type Outcome = "processed" | "duplicate" | "ignored" | "queued" | "needs_review";

/** How an endpoint processes: in the request (`sync`), by a worker (`async`), or in the request with a worker as fallback (`hybrid`). */
export type Mode = "sync" | "async" | "hybrid";

/** Where an event is received: the inbox key's provider and endpoint, and the endpoint's handler table. */
export interface ReceiveTarget {
  provider: string;
  endpoint: string;
  handlers: HandlerTable;
}

/**
 * Sync mode (seed §5.3): in one transaction, record the event in the inbox and apply its handler;
 * both commit together or neither does.
 * - `duplicate`: the key was already recorded (or a concurrent delivery committed it first).
 * - `ignored`: no handler for the type; the row is recorded so a redelivery is a duplicate.
 * - `processed`: the handler ran and committed with the inbox row.
 * `statementTimeoutMs` (optional) bounds each statement (lock waits included), so a row locked
 * elsewhere cannot hold a delivery and its connection for long: the attempt fails, rolls back, and the
 * provider retries.
 * A handler made by `statementHandler` (all billing handlers) runs in the same statement as the inbox
 * insert: one round trip and no BEGIN/COMMIT (a single statement is its own transaction), with the
 * same all-or-nothing guarantee; other handlers run in a `sql.begin` transaction. `effect` (optional)
 * is that statement handler's rendered steps when the caller built them already (sync-group.ts).
 * After a processed event's commit, outbox dispatchers are woken (coalesced NOTIFY, notifier.ts).
 * An attempt PostgreSQL rolled back as a deadlock or serialization failure (a concurrent transaction,
 * such as a backfill or a worker, holding rows in the other order), or stopped by a cancel meant for
 * another statement of its connection (isStrayCancel), is tried again at once, up to
 * {@link SYNC_TRIES} attempts in all (PostgreSQL manual, 13.4 "Serialization Failure Handling"):
 * nothing of the failed attempt remains, so a new one is safe.
 * Throws whatever the handler or the database threw, after the rollback: nothing of this attempt
 * remains, so the provider's retry processes it again (no Case A loss, no Case B double booking).
 */
export async function receiveSync(
  db: Db,
  target: ReceiveTarget,
  event: VerifiedEvent,
  statementTimeoutMs?: number,
  effect?: StatementEffect,
): Promise<Outcome> {
  return tryAgainWhile(isRetryableConflict, () => receiveSyncOnce(db, target, event, statementTimeoutMs, effect));
}

/** Runs `attempt` again, up to {@link SYNC_TRIES} attempts in all, while it fails with an error `retryable` accepts. */
async function tryAgainWhile<T>(retryable: (err: unknown) => boolean, attempt: () => Promise<T>): Promise<T> {
  for (let n = 1; ; n++) {
    try {
      return await attempt();
    } catch (err) {
      if (!retryable(err) || n >= SYNC_TRIES) throw err;
    }
  }
}

/** Attempts of {@link receiveSync} when PostgreSQL rolls one back as a deadlock or serialization failure. */
export const SYNC_TRIES = 3;

async function receiveSyncOnce(
  db: Db,
  target: ReceiveTarget,
  event: VerifiedEvent,
  statementTimeoutMs: number | undefined,
  built: StatementEffect | undefined,
): Promise<Outcome> {
  const handler = target.handlers[event.type];
  const key = { provider: target.provider, endpoint: target.endpoint, eventId: event.id };
  if (handler?.statement) {
    const effect = built ?? handler.statement(db, event.subject.object, { ...key, eventType: event.type });
    if (!(await recordAndApply(db, key, event, effect, statementTimeoutMs))) return "duplicate";
    notifierFor(db, OUTBOX_CHANNEL).wake(); // the handler may have written outbox rows
    return "processed";
  }
  const outcome = await db.begin(async (tx): Promise<Outcome> => {
    if (statementTimeoutMs !== undefined) await tx`select set_config('statement_timeout', ${String(statementTimeoutMs)}, true)`;
    const inserted = await recordEvent(tx, key, event, handler ? "processed" : "ignored");
    if (!inserted) return "duplicate";
    if (!handler) return "ignored";
    await handler(tx, event.subject.object, { ...key, eventType: event.type });
    return "processed";
  });
  if (outcome === "processed") notifierFor(db, OUTBOX_CHANNEL).wake();
  return outcome;
}

/**
 * Async mode (seed §6): one statement records the event unprocessed (its own transaction), then
 * workers are woken by a coalesced NOTIFY sent after that commit (notifier.ts explains why not inside
 * it); from the commit on, retrying is our job, not the provider's. Types without a
 * handler are recorded `ignored` at once (no worker round trip). Returns `queued`, `ignored` or
 * `duplicate`. Throws the database error (nothing was recorded).
 */
export async function receiveAsync(db: Db, target: ReceiveTarget, event: VerifiedEvent): Promise<Outcome> {
  const handled = target.handlers[event.type] !== undefined;
  const key = { provider: target.provider, endpoint: target.endpoint, eventId: event.id };
  const inserted = await recordEvent(db, key, event, handled ? null : "ignored");
  if (!inserted) return "duplicate";
  if (!handled) return "ignored";
  notifierFor(db).wake();
  return "queued";
}

/** Settings of {@link receiveHybrid}. */
export interface HybridOptions {
  /** Time budget for the in-request attempt, ms (each statement, and the whole attempt). */
  budgetMs: number;
  backoff: Backoff;
}

/**
 * Hybrid mode: processes in the request like {@link receiveSync} (a statement handler as one statement
 * with the inbox insert, cancelled at `budgetMs`); when the handler fails or the
 * attempt exceeds `budgetMs`, the attempt rolls back and a fresh short transaction records the
 * event unprocessed with `attempts = 1` and `last_error` for the worker (`queued`; a PermanentError
 * parks it as needs-review: `needs_review`), see {@link recordFallback}. If the database is unavailable, or the fallback record cannot be
 * written either, this throws: the caller answers 5xx and nothing was acknowledged.
 * `onFallback` receives the error that caused the fallback (for logging).
 */
export async function receiveHybrid(
  db: Db,
  target: ReceiveTarget,
  event: VerifiedEvent,
  options: HybridOptions,
  onFallback?: (err: unknown) => void,
): Promise<Outcome> {
  const started = Date.now();
  try {
    return await receiveSync(db, withDeadline(target, started, options.budgetMs), event, options.budgetMs);
  } catch (err) {
    if (isDatabaseUnavailable(err)) throw err;
    onFallback?.(err);
    return recordFallback(db, target, event, err, options.backoff);
  }
}

/**
 * After an in-request attempt rolled back: records the event for the worker in a fresh short
 * transaction, with `attempts = 1` and `last_error` (`queued`), or parked as needs-review at once when
 * `err` is permanent ({@link isPermanent}: `needs_review`); `duplicate` when a concurrent delivery recorded the key
 * meanwhile. An event whose payload PostgreSQL cannot store as jsonb is kept as needs-review with its
 * raw body instead (recordUnstorable). A write stopped by a cancel meant for another statement is
 * tried again (up to {@link SYNC_TRIES} attempts). Sync and async modes use it for permanent failures only (a 5xx would make the provider retry, in vain,
 * for days); hybrid mode for every handler failure.
 * @throws the database error when the row cannot be written: the caller must answer 5xx.
 */
export async function recordFallback(
  db: Db,
  target: ReceiveTarget,
  event: VerifiedEvent,
  err: unknown,
  backoff: Backoff,
): Promise<Outcome> {
  const key = { provider: target.provider, endpoint: target.endpoint, eventId: event.id };
  const permanent = isPermanent(err);
  let recorded: boolean;
  try {
    recorded = await tryAgainWhile(isStrayCancel, () => recordFailedAttempt(db, key, event, describeError(err), permanent, backoff));
  } catch (storeErr) {
    if (!isDataError(storeErr)) throw storeErr;
    // The payload itself cannot be jsonb: keep the verified bytes as text, parked for an operator.
    const note = `Payload cannot be stored as jsonb (${describeError(storeErr)}); kept as raw_body`;
    return (await recordUnstorable(db, key, event, note.slice(0, 300))) ? "needs_review" : "duplicate";
  }
  if (!recorded) return "duplicate";
  return permanent ? "needs_review" : "queued";
}

/**
 * Wraps every multi-statement handler so an attempt that ran past the budget rolls back even if each
 * statement was quick. Statement handlers stay as they are: receiveSync runs them as the inbox insert's
 * own single statement, which its client-side cancel bounds by the budget as a whole.
 */
function withDeadline(target: ReceiveTarget, started: number, budgetMs: number): ReceiveTarget {
  const handlers = Object.fromEntries(
    Object.entries(target.handlers).map(([type, handler]) => [
      type,
      handler.statement
        ? handler
        : async (...args: Parameters<typeof handler>) => {
            await handler(...args);
            const elapsed = Date.now() - started;
            if (elapsed > budgetMs) throw new Error(`Time budget exceeded: ${elapsed} ms, budget ${budgetMs} ms`);
          },
    ]),
  );
  return { ...target, handlers };
}
