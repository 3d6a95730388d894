import { isDatabaseUnavailable, isStrayCancel, sqlState, SQLSTATE, type Db } from "../db/db.ts";
import { AppError } from "../errors.ts";
import { recordEvent, type InboxKey } from "../inbox/inbox.ts";
import { notifierFor } from "../inbox/notifier.ts";
import { keyText, recordEvents, type InboxEntry } from "../inbox/record-events.ts";
import type { VerifiedEvent } from "../providers/provider.ts";
import type { Limiter } from "./limiter.ts";
import { receiveAsync, type Outcome, type ReceiveTarget } from "./receive.ts";

/** Default largest group: deliveries recorded by one statement. */
export const DEFAULT_GROUP_ROWS = 64;

/** One group as it is sent: `deliveries` answered by it, `rows` in its insert (in-group duplicates are one row). */
export interface GroupSent {
  deliveries: number;
  rows: number;
}

/** Settings of {@link createGroupCommit}. */
export interface GroupCommitOptions {
  /** Most deliveries in one group; more wait for the next. Default {@link DEFAULT_GROUP_ROWS}. */
  maxRows?: number;
  /** Called as each group's insert is sent (synchronously, before its statement runs). */
  onGroup?: (group: GroupSent) => void;
  /** Called when a group's statement was refused and its deliveries are retried one by one, with the error. */
  onFallback?: (group: GroupSent, err: unknown) => void;
  /**
   * The receiver's bound on database work at once: each group takes ONE slot for its statement (it
   * uses one connection however many deliveries it answers), so grouped deliveries do not each hold
   * a slot while they wait for their group. When no slot frees within the limiter's queue timeout,
   * every delivery of the group is rejected with its `overloaded` error (nothing was sent).
   */
  limiter?: Limiter;
  /**
   * Time bound of a delivery, ms from its arrival (the receiver's statement timeout): a delivery not
   * sent by then is refused `overloaded` and never sent, and a group's statement is cancelled (SQLSTATE
   * 57014, nothing written) when its earliest delivery's bound passes, so a delivery the receiver
   * answers 5xx at its answer deadline (this bound plus 1 s) was not recorded behind its back.
   * Default: unbounded.
   */
  statementTimeoutMs?: number;
}

/** Async receive with group commit; see {@link createGroupCommit}. */
export interface GroupCommit {
  /** Same contract as `receiveAsync(db, target, event)`: `queued`, `ignored` or `duplicate`, after the commit holding the row; throws the database error. */
  receive(target: ReceiveTarget, event: VerifiedEvent): Promise<Outcome>;
}

/** A delivery waiting for its group (this file's async groups, and sync-group.ts's): answered through `resolve`/`reject`. */
export interface WaitingDelivery {
  target: ReceiveTarget;
  event: VerifiedEvent;
  /** When its group's work must be done by, ms since the epoch (Infinity: unbounded). */
  sendBy: number;
  resolve(outcome: Outcome): void;
  reject(err: unknown): void;
}

type Waiting = WaitingDelivery;

/**
 * Async mode with group commit on `db`: concurrent deliveries are recorded by one multi-row insert
 * (recordEvents; a group of one by recordEvent, as without group commit), one statement and so one commit, and each is answered from its own row's result
 * only after that commit, exactly as `receiveAsync` answers it alone.
 *
 * Collection ("natural batching", the leader/follower scheme of database group commit): a delivery
 * that finds no group in flight is sent at once, alone, with no timer, so a lone delivery waits for
 * nothing but its own insert; deliveries that arrive while a group's insert runs wait and form the
 * next group, sent as soon as that insert settles (at most `maxRows`; the rest form the one after).
 * One group in flight per pool: the group grows with the load instead of the connections in use.
 * With `limiter`, a group holds one of the receiver's database slots while its statement runs.
 * Rows are inserted in key order (no deadlock between two groups holding the same keys).
 *
 * Inside a group, deliveries of one key are one row: the first delivery gets the insert's result,
 * the others `duplicate`. Workers are woken once per group that queued a row, after its commit.
 * When the group's statement fails because of its rows (any error but an unavailable database or a
 * cancelled statement), or was stopped by a cancel meant for another statement of its connection
 * (isStrayCancel), every delivery of the group is retried alone with `receiveAsync`, so a row
 * PostgreSQL refuses fails only its own delivery. When the database is unavailable or the statement
 * was cancelled (statement timeout), every delivery of the group is rejected with that error: none
 * is acknowledged, and the provider retries.
 */
export function createGroupCommit(db: Db, options: GroupCommitOptions = {}): GroupCommit {
  const maxRows = Math.max(1, options.maxRows ?? DEFAULT_GROUP_ROWS);
  let waiting: Waiting[] = [];
  let inFlight = false;

  function send(): void {
    const now = Date.now();
    if (waiting.some((d) => d.sendBy <= now)) {
      for (const late of waiting.filter((d) => d.sendBy <= now))
        late.reject(notInTime(late.event.id));
      waiting = waiting.filter((d) => d.sendBy > now);
      if (waiting.length === 0) return;
    }
    const group = waiting.slice(0, maxRows);
    waiting = waiting.slice(maxRows);
    inFlight = true;
    let free = false;
    // Once the statement settled the connection is free: the next group goes out before this group's
    // deliveries are answered (their responses and log lines would otherwise delay it).
    const next = (): void => {
      if (free) return;
      free = true;
      inFlight = false;
      if (waiting.length > 0) send();
    };
    void commit(group, next).finally(next);
  }

  /** Records `group`; calls `settled` as soon as its statement settled, then settles every delivery of it (a fallback runs on). */
  async function commit(group: Waiting[], settled: () => void): Promise<void> {
    const first = new Map<string, Waiting>();
    for (const delivery of group) {
      const text = keyText(keyOf(delivery));
      if (!first.has(text)) first.set(text, delivery);
    }
    // Key order: two groups (two receiver processes, or a backfill) inserting the same keys take the
    // unique index's entries in one order, so they wait for each other instead of deadlocking.
    const entries: InboxEntry[] = [...first]
      .sort(([a], [b]) => (a < b ? -1 : 1)) // keys are distinct
      .map(([, delivery]) => ({ key: keyOf(delivery), event: delivery.event, as: handled(delivery) ? null : "ignored" }));
    const sent = { deliveries: group.length, rows: entries.length };
    let inserted: Set<string>;
    try {
      const insert = () => {
        // Past a delivery's bound (a slot came late, say) nothing is sent: its answer is a 5xx anyway.
        const boundMs = Math.min(...group.map((d) => d.sendBy)) - Date.now();
        if (boundMs <= 0) throw notInTime(`${group.length} delivery(ies)`);
        options.onGroup?.(sent);
        return insertGroup(db, entries, Number.isFinite(boundMs) ? boundMs : undefined);
      };
      inserted = await (options.limiter ? options.limiter.run(insert) : insert());
    } catch (err) {
      settled();
      if (err instanceof AppError) {
        for (const delivery of group) delivery.reject(err); // no slot, or no time left: nothing was sent
        return;
      }
      if (!isStrayCancel(err) && (group.length === 1 || isDatabaseUnavailable(err) || sqlState(err) === SQLSTATE.queryCanceled)) {
        for (const delivery of group) delivery.reject(err);
      } else {
        // One of the rows is refused (or a cancel meant for another statement stopped it): each delivery alone, so only that one fails.
        options.onFallback?.(sent, err);
        for (const delivery of group) receiveAsync(db, delivery.target, delivery.event).then(delivery.resolve, delivery.reject);
      }
      return;
    }
    settled();
    let queued = false;
    for (const delivery of group) {
      const text = keyText(keyOf(delivery));
      if (first.get(text) !== delivery || !inserted.has(text)) {
        delivery.resolve("duplicate");
      } else if (handled(delivery)) {
        queued = true;
        delivery.resolve("queued");
      } else {
        delivery.resolve("ignored");
      }
    }
    if (queued) notifierFor(db).wake();
  }

  return {
    receive(target, event) {
      const sendBy = options.statementTimeoutMs === undefined ? Infinity : Date.now() + options.statementTimeoutMs;
      // Not Promise.withResolvers: Node.js 20, a supported runtime, lacks it.
      const promise = new Promise<Outcome>((resolve, reject) => waiting.push({ target, event, sendBy, resolve, reject }));
      if (!inFlight) send();
      return promise;
    },
  };
}

/** The keys `entries` inserted: a lone row by recordEvent, the very statement of a delivery without group commit. */
async function insertGroup(db: Db, entries: InboxEntry[], timeoutMs: number | undefined): Promise<Set<string>> {
  const [only] = entries;
  if (entries.length > 1 || !only) return recordEvents(db, entries, timeoutMs);
  return (await recordEvent(db, only.key, only.event, only.as, timeoutMs)) ? new Set([keyText(only.key)]) : new Set();
}

/**
 * The error of a grouped delivery whose time bound (`sendBy`) passed before its group committed:
 * AppError `overloaded` (503 with Retry-After), `what` naming the event id or the deliveries.
 */
export function notInTime(what: string): AppError {
  return new AppError("overloaded", `Cannot record ${what} in time: nothing was recorded, retry later`);
}

/** The inbox key `(provider, endpoint, event_id)` of a waiting delivery. */
export function keyOf(delivery: WaitingDelivery): InboxKey {
  return { provider: delivery.target.provider, endpoint: delivery.target.endpoint, eventId: delivery.event.id };
}

function handled(delivery: Waiting): boolean {
  return delivery.target.handlers[delivery.event.type] !== undefined;
}
