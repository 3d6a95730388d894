// One page of events read from Stripe's API, recorded in the inbox through the endpoint's mode, each
// event in one transaction with the checkpoint's move up to it.
import type { Db, Tx } from "../db/db.ts";
import { isPermanent } from "../db/db.ts";
import { applyEvent } from "../inbox/apply-event.ts";
import type { Backoff } from "../inbox/inbox.ts";
import type { VerifiedEvent } from "../providers/provider.ts";
import {
  DEFAULT_STATEMENT_TIMEOUT_MS,
  recordFallback,
  recordRefusal,
  refusalOf,
  type Mode,
  type Outcome,
  type ReceiveTarget,
} from "../receiver/receive.ts";

/** What recording one page did: outcome counts (`duplicate` = already recorded, by a webhook or an earlier run). */
export type PageCounts = Record<Outcome, number>;

/** An empty {@link PageCounts}. */
export function noCounts(): PageCounts {
  return { processed: 0, duplicate: 0, ignored: 0, queued: 0, needs_review: 0, ignored_mode: 0 };
}

/**
 * Records `events` (oldest first), each through {@link applyEvent} in its own transaction, under the
 * key a webhook delivery of it uses, `(target.provider, target.endpoint, event.id)`, the way the
 * endpoint's `mode` receives a delivery: sync and hybrid apply the handler with the inbox row, async
 * leaves the row for a worker. `moveTo(tx, i)` runs in event `i`'s transaction (the checkpoint's move
 * up to it; `i = -1` for an empty page, alone); when it returns false that transaction rolls back and
 * this throws. A key already recorded is a `duplicate`, changes nothing, and still moves the
 * checkpoint. A handler failure no retry can fix (sync, hybrid) parks the event as needs-review; any
 * other failure in hybrid mode queues it for the worker: the event is recorded, then applied again as
 * the duplicate it now is, which moves the checkpoint. One event per transaction holds the locks of
 * one delivery at a time, as a webhook does (a page-long transaction would deadlock with webhooks on
 * invoice rows vs inbox keys).
 * An event `policy` (the endpoint's mode and Connect flag) refuses is recorded as a webhook delivery of
 * it would be ({@link refusalOf}, {@link recordRefusal}: `ignored_mode`, or parked as needs-review),
 * never applied; the checkpoint then moves past it like past a duplicate.
 * @throws a sync-mode handler failure that a retry may fix (that event rolled back; the checkpoint
 *   stays before it, so the next run starts there), a database error, or Error when `moveTo` refused.
 */
export async function recordPage(
  db: Db,
  target: ReceiveTarget,
  mode: Mode,
  backoff: Backoff,
  events: readonly VerifiedEvent[],
  moveTo: (tx: Tx, index: number) => Promise<boolean>,
  policy: Parameters<typeof refusalOf>[0],
): Promise<PageCounts> {
  const counts = noCounts();
  if (events.length === 0) await db.begin((tx) => moved(moveTo(tx, -1)));
  for (const [i, event] of events.entries()) {
    const apply = () =>
      applyEvent(db, {
        key: { provider: target.provider, endpoint: target.endpoint, eventId: event.id },
        handlers: target.handlers,
        type: event.type,
        object: event.subject.object,
        hold: { insert: event, queue: mode === "async" },
        timeoutMs: DEFAULT_STATEMENT_TIMEOUT_MS,
        after: (tx) => moved(moveTo(tx, i)),
      });
    let outcome: Outcome;
    const refusal = refusalOf(policy, event);
    if (refusal) {
      outcome = await recordRefusal(db, target, event, refusal, backoff);
      await apply(); // the duplicate it now is: moves the checkpoint, applies nothing
      counts[outcome]++;
      continue;
    }
    try {
      outcome = await apply();
    } catch (err) {
      if (err instanceof Error && err.message === LEASE_LOST) throw err;
      if (mode === "async" || (mode === "sync" && !isPermanent(err))) throw err;
      outcome = await recordFallback(db, target, event, err, backoff);
      await apply();
    }
    counts[outcome]++;
  }
  return counts;
}

async function moved(move: Promise<boolean>): Promise<void> {
  if (!(await move)) throw new Error(LEASE_LOST);
}

const LEASE_LOST = "Cannot record the page: this process no longer holds the endpoint's backfill lease";
