import type { Db } from "../db/db.ts";

/** Wakes inbox workers (rows queued by async and hybrid mode, or requeued). */
export const INBOX_CHANNEL = "webhook_inbox";
/** Wakes outbox dispatchers (a processed event may have written outbox rows). */
export const OUTBOX_CHANNEL = "webhook_outbox";

/** Coalesced worker wake-ups for one pool; see {@link notifierFor}. */
export interface Notifier {
  /** Call after a queued row COMMITTED: guarantees a NOTIFY is sent after this call. Never throws. */
  wake(): void;
}

const notifiers = new WeakMap<Db, Map<string, Notifier>>();
const MIN_INTERVAL_MS = 100;

/**
 * The pool's notifier for `channel` (default {@link INBOX_CHANNEL}): `wake()` sends
 * `select pg_notify(channel, '')` in its own statement, at most one in flight and at most one per
 * 100 ms (River's limit per queue); wakes that arrive meanwhile are folded into one more NOTIFY after it.
 *
 * Why not `pg_notify` inside the inserting transaction: PostgreSQL serializes every committing
 * transaction that has notified on a database-wide lock held through its commit (async.c,
 * `PreCommit_Notify`: "Serialize writers by acquiring a special lock that we hold till after
 * commit"), which measured about six times fewer async inserts per second here (bun run bench). Sent
 * after the commit instead, every queued row is still followed by a NOTIFY, and workers also poll.
 * A NOTIFY that fails (database down) is dropped: the poll interval bounds the delay.
 */
export function notifierFor(db: Db, channel: string = INBOX_CHANNEL): Notifier {
  let byChannel = notifiers.get(db);
  if (!byChannel) {
    byChannel = new Map();
    notifiers.set(db, byChannel);
  }
  let notifier = byChannel.get(channel);
  if (!notifier) {
    notifier = createNotifier(db, channel);
    byChannel.set(channel, notifier);
  }
  return notifier;
}

function createNotifier(db: Db, channel: string): Notifier {
  let inFlight = false;
  let again = false;
  const send = (): void => {
    inFlight = true;
    again = false;
    db`select pg_notify(${channel}, '')`.then(
      () => done(),
      () => done(),
    );
  };
  // At most one NOTIFY per MIN_INTERVAL_MS per channel and pool: under load one wake-up serves many
  // rows (workers and dispatchers busy with a batch claim again by themselves), and each NOTIFY
  // briefly takes PostgreSQL's notify lock.
  const done = (): void => {
    setTimeout(() => {
      inFlight = false;
      if (again) send();
    }, MIN_INTERVAL_MS);
  };
  return {
    wake() {
      if (inFlight) again = true;
      else send();
    },
  };
}
