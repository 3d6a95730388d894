import type { Db } from "./db.ts";
import { NOTIFY_CHANNEL } from "./inbox.ts";

/** Coalesced worker wake-ups for one pool; see {@link notifierFor}. */
export interface Notifier {
  /** Call after a queued row COMMITTED: guarantees a NOTIFY is sent after this call. Never throws. */
  wake(): void;
}

const notifiers = new WeakMap<Db, Notifier>();

/**
 * The pool's notifier: `wake()` sends `select pg_notify('webhook_inbox', '')` in its own statement,
 * with at most one in flight; wakes that arrive meanwhile are folded into one more NOTIFY after it.
 *
 * Why not `pg_notify` inside the inserting transaction: PostgreSQL serializes every committing
 * transaction that has notified on a database-wide lock held through its commit (async.c,
 * `PreCommit_Notify`: "Serialize writers by acquiring a special lock that we hold till after
 * commit"), which measured about six times fewer async inserts per second here (bun run bench). Sent
 * after the commit instead, every queued row is still followed by a NOTIFY, and workers also poll.
 * A NOTIFY that fails (database down) is dropped: the poll interval bounds the delay.
 */
export function notifierFor(db: Db): Notifier {
  let notifier = notifiers.get(db);
  if (!notifier) {
    notifier = createNotifier(db);
    notifiers.set(db, notifier);
  }
  return notifier;
}

function createNotifier(db: Db): Notifier {
  let inFlight = false;
  let again = false;
  const send = (): void => {
    inFlight = true;
    again = false;
    db`select pg_notify(${NOTIFY_CHANNEL}, '')`.then(
      () => done(),
      () => done(),
    );
  };
  const done = (): void => {
    inFlight = false;
    if (again) send();
  };
  return {
    wake() {
      if (inFlight) again = true;
      else send();
    },
  };
}
