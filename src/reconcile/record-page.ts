// One page of events read from Stripe's API, recorded in the inbox through the endpoint's mode and
// with the checkpoint, in one transaction.
import type { Db, Tx } from "../db/db.ts";
import { isPermanent } from "../db/db.ts";
import { describeError } from "../errors.ts";
import { recordAndApply, recordEvent, recordFailedAttempt, type Backoff, type InboxKey } from "../inbox/inbox.ts";
import { notifierFor, OUTBOX_CHANNEL } from "../inbox/notifier.ts";
import type { VerifiedEvent } from "../providers/provider.ts";
import type { Mode, Outcome, ReceiveTarget } from "../receiver/receive.ts";

/** What recording one page did: outcome counts (`duplicate` = already recorded, by a webhook or an earlier run). */
export type PageCounts = Record<Outcome, number>;

/** An empty {@link PageCounts}. */
export function noCounts(): PageCounts {
  return { processed: 0, duplicate: 0, ignored: 0, queued: 0, needs_review: 0 };
}

/**
 * Records `events` (oldest first) in one transaction, each under the key a webhook delivery of it
 * uses, `(target.provider, target.endpoint, event.id)`, through the endpoint's `mode`, the way
 * receiveSync / receiveAsync / receiveHybrid do (receive.ts) and with the same inbox statements:
 * - sync: inbox row and handler together (a statement handler as one statement with the insert);
 * - async: the row unprocessed for a worker (types without a handler `ignored` at once);
 * - hybrid: like sync; a handler failure rolls back to the event's savepoint and queues the row for
 *   the worker with `attempts = 1` and `last_error` (no time budget: no request waits for the answer).
 * A permanent handler failure parks the event as needs-review (sync and hybrid). Each event runs in a
 * savepoint so that parking one keeps the others. A key already recorded is a `duplicate` and changes
 * nothing (a webhook delivery racing the page waits on the unique index for whichever inserts first).
 * Then `afterRows(tx)` runs in the same transaction (the checkpoint's move); when it returns false
 * the whole page rolls back and this throws.
 * @throws a transient handler failure in sync mode (the page rolls back; the caller retries it, as
 *   Stripe would retry a 5xx), a database error, or Error when `afterRows` refused.
 */
export async function recordPage(
  db: Db,
  target: ReceiveTarget,
  mode: Mode,
  backoff: Backoff,
  events: readonly VerifiedEvent[],
  afterRows: (tx: Tx) => Promise<boolean>,
): Promise<PageCounts> {
  const counts = await db.begin(async (tx) => {
    const c = noCounts();
    for (const event of events) c[await recordOne(tx, target, mode, backoff, event)]++;
    if (!(await afterRows(tx))) throw new Error("Cannot record the page: this process no longer holds the endpoint's backfill lease");
    return c;
  });
  if (counts.queued > 0) notifierFor(db).wake();
  if (counts.processed > 0) notifierFor(db, OUTBOX_CHANNEL).wake();
  return counts;
}

async function recordOne(tx: Tx, target: ReceiveTarget, mode: Mode, backoff: Backoff, event: VerifiedEvent): Promise<Outcome> {
  const key: InboxKey = { provider: target.provider, endpoint: target.endpoint, eventId: event.id };
  const handler = target.handlers[event.type];
  if (mode === "async" || !handler) {
    const inserted = await recordEvent(tx, key, event, handler ? null : "ignored");
    return !inserted ? "duplicate" : handler ? "queued" : "ignored";
  }
  try {
    return await tx.savepoint(async (sp) => {
      if (handler.statement) {
        const effect = handler.statement(sp, event.subject.object, { ...key, eventType: event.type });
        return (await recordAndApply(sp, key, event, effect)) ? "processed" : "duplicate";
      }
      if (!(await recordEvent(sp, key, event, "processed"))) return "duplicate";
      await handler(sp, event.subject.object, { ...key, eventType: event.type });
      return "processed";
    });
  } catch (err) {
    if (!isPermanent(err) && mode === "sync") throw err;
    const recorded = await recordFailedAttempt(tx, key, event, describeError(err), isPermanent(err), backoff);
    return !recorded ? "duplicate" : isPermanent(err) ? "needs_review" : "queued";
  }
}
