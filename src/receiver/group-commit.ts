import { isDataError, type Db } from "../db/db.ts";
import { AppError } from "../errors.ts";
import type { VerifiedEvent } from "../providers/provider.ts";
import type { Limiter } from "./limiter.ts";
import { DEFAULT_STATEMENT_TIMEOUT_MS, receiveAsync, recordQueued, type Delivery, type Outcome, type ReceiveTarget } from "./receive.ts";

/** Default largest group: deliveries recorded by one statement. */
export const DEFAULT_GROUP_ROWS = 64;

/** Settings of {@link createGroupCommit}. */
export interface GroupCommitOptions {
  /** Most deliveries in one group; more wait for the next. Default {@link DEFAULT_GROUP_ROWS}. */
  maxRows?: number;
  /**
   * The receiver's bound on database work at once: a group takes ONE slot for its transaction (it
   * uses one connection however many deliveries it answers), and so does each delivery redone alone.
   * When no slot frees within the limiter's queue timeout, the group's deliveries are rejected with
   * its `overloaded` error (nothing was sent).
   */
  limiter?: Limiter;
  /** Time bound of a delivery redone alone (its own transaction, see receiveAsync), ms. Default 10000. */
  timeoutMs?: number;
  /**
   * Longest a delivery waits for its group to be sent (the group before it still running, say held by
   * a table lock), ms: then it is answered `overloaded` (503) and never sent, as the limiter answers a
   * delivery that waits too long for a slot. Default: unbounded.
   */
  queueTimeoutMs?: number;
  /** Told when a group's insert was refused because of a row, before its deliveries are redone one by one. */
  onFallback?: (deliveries: number, err: unknown) => void;
}

/** Async receive with group commit; see {@link createGroupCommit}. */
export interface GroupCommit {
  /** Same contract as `receiveAsync`: `queued`, `ignored` or `duplicate`, after the commit holding the row; throws the database error. */
  receive(target: ReceiveTarget, event: VerifiedEvent): Promise<Outcome>;
}

interface Waiting extends Delivery {
  resolve(outcome: Outcome): void;
  reject(err: unknown): void;
  /** When it began to wait, ms since the epoch. */
  since: number;
}

/**
 * Async mode with group commit: concurrent deliveries are recorded by one multi-row insert
 * ({@link recordQueued}: one autocommit statement, in key order, one row per key, workers woken after
 * it), so one commit (one WAL flush) and one round trip serve them all, and each is answered from its
 * own row's result only after that commit, exactly as `receiveAsync` answers it alone. The statement has no transaction to set a bound in (BEGIN and
 * COMMIT round trips cost about a third of the throughput at 16 senders: docs/performance.md), and
 * needs none for a guarantee: it runs no handler, and it can wait only on another transaction inserting
 * one of its keys (itself bounded by its own bound) or on a table lock an operator or a migration
 * holds; a receiver killed meanwhile may leave its rows recorded, and the provider's retry is then a
 * duplicate. A delivery that finds no group in flight is sent at once, alone; deliveries that arrive while
 * a group's transaction runs wait and form the next group (at most `maxRows`), sent as soon as it
 * settles: one group in flight, growing with the load ("natural batching").
 * When PostgreSQL refuses a row of the group (a data error), each delivery is redone alone
 * (`receiveAsync`, under the limiter and the same bound), so a bad row fails only its own delivery;
 * any other failure rejects every delivery of the group: none is acknowledged, the provider retries.
 */
export function createGroupCommit(db: Db, options: GroupCommitOptions = {}): GroupCommit {
  const maxRows = Math.max(1, options.maxRows ?? DEFAULT_GROUP_ROWS);
  const timeoutMs = options.timeoutMs ?? DEFAULT_STATEMENT_TIMEOUT_MS;
  const slot = <T>(work: () => Promise<T>): Promise<T> => (options.limiter ? options.limiter.run(work) : work());
  let waiting: Waiting[] = [];
  let inFlight = false;
  /** One timer for the oldest waiting delivery's `queueTimeoutMs` (waiting is in arrival order). */
  let sweepTimer: ReturnType<typeof setTimeout> | undefined;

  function send(): void {
    const group = waiting.slice(0, maxRows);
    waiting = waiting.slice(maxRows);
    inFlight = true;
    void commit(group);
  }

  /**
   * The group's insert settled and its connection is free: the next group goes out now, before this
   * group's deliveries are answered (their responses and log lines would otherwise delay it).
   */
  function settled(): void {
    inFlight = false;
    if (waiting.length > 0) send();
  }

  async function commit(group: Waiting[]): Promise<void> {
    let outcomes: Outcome[];
    try {
      outcomes = await slot(() => recordQueued(db, group, timeoutMs));
    } catch (err) {
      settled();
      if (!isDataError(err) || group.length === 1) {
        for (const delivery of group) delivery.reject(err);
        return;
      }
      options.onFallback?.(group.length, err);
      for (const d of group) slot(() => receiveAsync(db, d.target, d.event, timeoutMs)).then(d.resolve, d.reject);
      return;
    }
    settled();
    group.forEach((delivery, i) => delivery.resolve(outcomes[i]!));
  }

  /** Arms the one timer for the oldest waiting delivery, if none is armed. */
  function armSweep(): void {
    const oldest = waiting[0];
    if (sweepTimer !== undefined || oldest === undefined || options.queueTimeoutMs === undefined) return;
    sweepTimer = setTimeout(sweep, Math.max(0, oldest.since + options.queueTimeoutMs - Date.now()));
  }

  /** Answers the deliveries that waited `queueTimeoutMs` for their group `overloaded`; they are never sent. */
  function sweep(): void {
    sweepTimer = undefined;
    const limit = Date.now() - (options.queueTimeoutMs ?? Infinity);
    while (waiting[0] !== undefined && waiting[0].since <= limit) {
      const delivery = waiting.shift() as Waiting;
      delivery.reject(
        new AppError(
          "overloaded",
          `Cannot record ${delivery.event.id} in time: the group before it is still running; nothing was recorded, retry later`,
        ),
      );
    }
    armSweep();
  }

  return {
    receive(target, event) {
      const promise = new Promise<Outcome>((resolve, reject) => waiting.push({ target, event, resolve, reject, since: Date.now() }));
      if (!inFlight) send();
      else armSweep();
      return promise;
    },
  };
}
