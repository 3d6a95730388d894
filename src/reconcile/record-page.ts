// One page of events read from Stripe's API, recorded in the inbox through the endpoint's mode, each
// event in one transaction with the checkpoint's move up to it.
import type { Db, Tx } from "../db/db.ts";
import { isPermanent, sqlState, SQLSTATE } from "../db/db.ts";
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

/** Tries of one event's transaction when it failed for a reason another try can fix. */
const TRIES = 3;

/**
 * Records `events` (oldest first), each in its own transaction, under the key a webhook delivery of
 * it uses, `(target.provider, target.endpoint, event.id)`, through the endpoint's `mode`, the way
 * receiveSync / receiveAsync / receiveHybrid do (receive.ts) and with the same inbox statements:
 * - sync: inbox row and handler together (a statement handler as one statement with the insert);
 * - async: the row unprocessed for a worker (types without a handler `ignored` at once);
 * - hybrid: like sync; a handler failure rolls back to the event's savepoint and queues the row for
 *   the worker with `attempts = 1` and `last_error` (no time budget: no request waits for the answer).
 * A permanent handler failure parks the event as needs-review (sync and hybrid). A key already
 * recorded is a `duplicate` and changes nothing (a webhook delivery racing the page waits on the
 * unique index for whichever inserts first).
 * One event per transaction, so backfill holds the locks of one delivery at a time, as a webhook
 * does: a page-long transaction that holds invoice rows of earlier events while it waits on the
 * inbox key of a later event a webhook is inserting deadlocks with that webhook (which holds the key
 * and waits on the invoice). `moveTo(tx, i)` runs in event `i`'s transaction (the checkpoint's move
 * up to it, `i = -1` for an empty page, alone); when it returns false that transaction rolls back and
 * this throws. An event's transaction that fails for a reason another try can fix (a deadlock, a
 * serialization failure, a transient handler failure) is tried again, up to three times in all
 * (PostgreSQL manual, 13.4 "Serialization Failure Handling"); what earlier events committed stays.
 * @throws a transient handler failure in sync mode after its tries (that event rolled back; the
 *   checkpoint stays before it, so the next run starts there), a database error, or Error when
 *   `moveTo` refused.
 */
export async function recordPage(
  db: Db,
  target: ReceiveTarget,
  mode: Mode,
  backoff: Backoff,
  events: readonly VerifiedEvent[],
  moveTo: (tx: Tx, index: number) => Promise<boolean>,
): Promise<PageCounts> {
  const counts = noCounts();
  if (events.length === 0) await tried(() => db.begin((tx) => moved(moveTo(tx, -1))));
  for (const [i, event] of events.entries()) {
    const outcome = await tried(() =>
      db.begin(async (tx) => {
        const o = await recordOne(tx, target, mode, backoff, event);
        await moved(moveTo(tx, i));
        return o;
      }),
    );
    counts[outcome]++;
  }
  if (counts.queued > 0) notifierFor(db).wake();
  if (counts.processed > 0) notifierFor(db, OUTBOX_CHANNEL).wake();
  return counts;
}

async function moved(move: Promise<boolean>): Promise<void> {
  if (!(await move)) throw new Error(LEASE_LOST);
}

const LEASE_LOST = "Cannot record the page: this process no longer holds the endpoint's backfill lease";

async function tried<T>(attempt: () => Promise<T>): Promise<T> {
  for (let n = 1; ; n++) {
    try {
      return await attempt();
    } catch (err) {
      const again = !isPermanent(err) && sqlState(err) !== SQLSTATE.undefinedTable && !(err instanceof Error && err.message === LEASE_LOST);
      if (!again || n >= TRIES) throw err;
    }
  }
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
