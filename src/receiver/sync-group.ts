import { isDatabaseUnavailable, isStrayCancel, sqlState, SQLSTATE, type Db } from "../db/db.ts";
import { AppError } from "../errors.ts";
import { recordAndApplyStatement, type StatementEffect } from "../inbox/inbox.ts";
import { notifierFor, OUTBOX_CHANNEL } from "../inbox/notifier.ts";
import { keyText } from "../inbox/record-events.ts";
import type { VerifiedEvent } from "../providers/provider.ts";
import { keyOf, notInTime, type WaitingDelivery } from "./group-commit.ts";
import type { Limiter } from "./limiter.ts";
import { receiveSync, type Outcome, type ReceiveTarget } from "./receive.ts";

/** Default most deliveries in one sync transaction. */
export const DEFAULT_SYNC_GROUP_ROWS = 16;

/** Default sync transactions in flight at once (more deliveries wait and join the next group). */
export const DEFAULT_SYNC_GROUPS_IN_FLIGHT = 2;

/** Default `stallMs` of {@link createSyncGroup}: a sync statement takes a few ms; one that waits this long waits on a lock. */
export const DEFAULT_SYNC_GROUP_STALL_MS = 250;

/** Settings of {@link createSyncGroup}. */
export interface SyncGroupOptions {
  /** Most deliveries in one transaction. Default {@link DEFAULT_SYNC_GROUP_ROWS}. */
  maxRows?: number;
  /** Transactions in flight at once. Default {@link DEFAULT_SYNC_GROUPS_IN_FLIGHT}. */
  maxInFlight?: number;
  /**
   * The receiver's bound on database work at once: each group takes ONE slot for its transaction. When
   * no slot frees within the limiter's queue timeout, every delivery of the group is rejected with its
   * `overloaded` error (nothing was sent).
   */
  limiter?: Limiter;
  /**
   * Time bound of a delivery, ms from its arrival (the receiver's statement timeout): a delivery not
   * sent by then is refused `overloaded` and never sent; a group's statements run under a transaction-
   * local `statement_timeout` of the time its earliest delivery has left, and its COMMIT is sent only
   * while that time lasts (else it rolls back and every delivery of it is refused `overloaded`), so a
   * delivery the receiver answers 5xx at its answer deadline (this bound plus 1 s) was not recorded
   * behind its back. Default: unbounded.
   */
  statementTimeoutMs?: number;
  /**
   * How long a group may wait, ms, before it no longer counts against `maxInFlight` (the next group
   * starts without it), and the most each of its statements may run (a transaction-local
   * `statement_timeout`; less when its deliveries have less time left): a statement stopped by it (stuck
   * on a row lock, say) runs again alone with the rest of its time, and its group-mates run again as a
   * group without it. Default {@link DEFAULT_SYNC_GROUP_STALL_MS}, or a quarter of `statementTimeoutMs`
   * when that is shorter.
   */
  stallMs?: number;
  /** Called as each group of two or more is sent, with its size. */
  onGroup?: (deliveries: number) => void;
  /** Called when a group's transaction failed and its deliveries are redone one by one, with the error. */
  onFallback?: (deliveries: number, err: unknown) => void;
}

/** Sync receive with group commit; see {@link createSyncGroup}. */
export interface SyncGroup {
  /**
   * Same contract as `receiveSync(db, target, event)` for an event whose handler is a statement
   * handler (`processed` or `duplicate`, after the commit that holds its row and its effect); throws
   * the database error (nothing of it committed), or AppError `overloaded` (nothing sent).
   * A handler that refuses the event before any SQL (a PermanentError while its statement is built)
   * rejects at once, alone.
   * @throws Error when the event's handler is not a statement handler (receive those with `receiveSync`).
   */
  receive(target: ReceiveTarget, event: VerifiedEvent): Promise<Outcome>;
}

/** A waiting sync delivery with its handler's statement effect, built (and so checked) when it arrived. */
type Waiting = WaitingDelivery & { effect: StatementEffect };

/**
 * Sync mode with group commit on `db`: concurrent sync deliveries share one transaction and so one
 * commit (one WAL flush, PostgreSQL manual 28.3 "Asynchronous Commit" explains what a commit waits
 * for), each delivery still the single statement that records its inbox row and applies its handler
 * (`recordAndApplyStatement`, as `receiveSync` runs it alone). Every delivery is answered only after
 * the COMMIT of its group, from its own statement's result: `processed`, or `duplicate` (a redelivery,
 * also of a delivery earlier in the same group: statements of one transaction see each other's rows).
 *
 * Collection (natural batching): a delivery that finds fewer than `maxInFlight` groups running is sent
 * at once; when a single one is waiting it runs exactly as `receiveSync` (one statement, no
 * BEGIN/COMMIT), so a lone delivery waits for nothing. Deliveries that arrive while `maxInFlight`
 * groups run wait and form the next group (at most `maxRows`). Statements of a group are pipelined in
 * one round trip and sorted by the subject's business key, then the inbox key, so two groups lock
 * invoices in one order (as the worker's batches do).
 *
 * Isolation by redoing: when a group's transaction fails for any reason but an unavailable database
 * or its deliveries' time bound (a statement PostgreSQL refused, a deadlock, a cancel meant for another
 * statement, a step that wrote for a duplicate), it rolls back whole and each of its deliveries runs
 * again alone with `receiveSync` in key order, so a bad event fails only its own delivery.
 * A row lock holds no more than one delivery for long: each statement of a group may run `stallMs` at
 * most (transaction-local `statement_timeout`); the one that bound stopped runs again alone with the
 * rest of its time, unawaited, while its group-mates run again as a group without it (each further
 * stuck statement is set aside the same way); and a group running longer than `stallMs` no longer
 * counts against `maxInFlight`.
 */
export function createSyncGroup(db: Db, options: SyncGroupOptions = {}): SyncGroup {
  const maxRows = Math.max(1, options.maxRows ?? DEFAULT_SYNC_GROUP_ROWS);
  const maxInFlight = Math.max(1, options.maxInFlight ?? DEFAULT_SYNC_GROUPS_IN_FLIGHT);
  // A quarter of the time bound when that is shorter, so the group-mates of a stuck statement have time left.
  const stallMs = Math.max(
    1,
    options.stallMs ?? Math.min(DEFAULT_SYNC_GROUP_STALL_MS, Math.floor((options.statementTimeoutMs ?? Infinity) / 4)),
  );
  let waiting: Waiting[] = [];
  /** Start times (ms) of the groups running or waiting for a slot. */
  const running = new Set<{ started: number }>();

  /** Groups that count against `maxInFlight`: one running longer than `stallMs` (waiting on a lock, say) no longer does. */
  function fresh(): number {
    const now = Date.now();
    let n = 0;
    for (const group of running) if (now - group.started < stallMs) n++;
    return n;
  }

  /** Runners started but not yet granted their slot: each will take up to `maxRows` waiting deliveries. */
  let untaken = 0;

  function pump(): void {
    while (waiting.length > untaken * maxRows && fresh() < maxInFlight) {
      untaken++;
      const entry = { started: Date.now() };
      running.add(entry);
      // Once this group counts as stalled, the next may start without waiting for it.
      const stalled = setTimeout(pump, stallMs);
      (stalled as { unref?: () => void }).unref?.();
      // The group is taken when its slot is granted, so it holds every delivery that arrived meanwhile.
      let taken = false;
      const take = async (): Promise<void> => {
        taken = true;
        untaken--;
        const group = waiting.slice(0, maxRows);
        waiting = waiting.slice(maxRows);
        await commit(group);
      };
      const run = options.limiter ? options.limiter.run(take) : take();
      void run
        .catch((err: unknown) => {
          if (taken) return; // commit() settles its deliveries itself
          // No slot within the queue timeout: nothing was sent; this runner's deliveries are the oldest waiting.
          untaken--;
          const group = waiting.slice(0, maxRows);
          waiting = waiting.slice(maxRows);
          for (const delivery of group) delivery.reject(err);
        })
        .finally(() => {
          clearTimeout(stalled);
          running.delete(entry);
          pump();
        });
    }
  }

  /** Runs `group` (possibly empty: an earlier runner took it) and settles every delivery of it. */
  async function commit(taken: Waiting[]): Promise<void> {
    const now = Date.now();
    const group: Waiting[] = [];
    for (const delivery of taken) {
      if (delivery.sendBy > now) group.push(delivery);
      else delivery.reject(notInTime(delivery.event.id));
    }
    if (group.length === 0) return;
    const ordered = group.sort((a, b) => compare(orderKey(a), orderKey(b)));
    if (ordered.length === 1) return alone(ordered[0] as Waiting);
    const deadline = Math.min(...ordered.map((d) => d.sendBy));
    // Each statement may wait on a lock at most `stallMs` (or the time left, when shorter): one delivery
    // stuck behind a lock holds its group-mates that long, not their whole time bound.
    const boundMs = Math.max(1, Math.min(stallMs, deadline - Date.now()));
    options.onGroup?.(ordered.length);
    const failed: unknown[] = [];
    let inserted: boolean[];
    try {
      inserted = await db.begin(async (tx) => {
        // Sent first: calling `then` sends a postgres.js query, so the order of these calls is the order on the wire.
        const bound = tx`select set_config('statement_timeout', ${String(boundMs)}, true)`.then(() => undefined);
        const statements = ordered.map((d, i) =>
          recordAndApplyStatement(tx, keyOf(d), d.event, d.effect).catch((err: unknown) => {
            failed[i] = err;
            throw err;
          }),
        );
        // Pipelined: every statement is written before the first answer is read.
        const [, ...rows] = await Promise.all([bound, ...statements]);
        if (Date.now() >= deadline) throw notInTime(`${ordered.length} deliveries`); // rolled back
        return rows.map((r) => r[0]?.inserted === true);
      });
    } catch (err) {
      const timedOut = sqlState(err) === SQLSTATE.queryCanceled && !isStrayCancel(err);
      // The statement the bound stopped (the others after it failed only because the transaction had).
      const stuck = timedOut ? ordered.filter((_, i) => sqlState(failed[i]) === SQLSTATE.queryCanceled) : [];
      if (err instanceof AppError || isDatabaseUnavailable(err) || (timedOut && stuck.length === 0)) {
        for (const delivery of ordered) delivery.reject(err);
        return;
      }
      options.onFallback?.(ordered.length, err);
      if (stuck.length > 0) {
        // It waited on a lock: it runs alone with the rest of its time (not awaited: it may wait again),
        // and its group-mates, which it held up, as a group again (which sets aside the next one stuck).
        for (const delivery of stuck) void alone(delivery);
        await commit(ordered.filter((d) => !stuck.includes(d)));
        return;
      }
      for (const delivery of ordered) await alone(delivery);
      return;
    }
    ordered.forEach((delivery, i) => delivery.resolve(inserted[i] ? "processed" : "duplicate"));
    if (inserted.some(Boolean)) notifierFor(db, OUTBOX_CHANNEL).wake(); // the handlers may have written outbox rows
  }

  /** One delivery by `receiveSync` (with the effect already built), bounded by the time it has left. */
  async function alone(delivery: Waiting): Promise<void> {
    const leftMs = delivery.sendBy - Date.now();
    if (leftMs <= 0) return delivery.reject(notInTime(delivery.event.id));
    await receiveSync(db, delivery.target, delivery.event, Number.isFinite(leftMs) ? leftMs : undefined, delivery.effect).then(
      delivery.resolve,
      delivery.reject,
    );
  }

  return {
    receive(target, event) {
      const build = target.handlers[event.type]?.statement;
      if (!build) throw new Error(`No statement handler for ${event.type}: receive it with receiveSync`);
      let effect: StatementEffect;
      try {
        // Built now, not in the group's transaction: an event its handler refuses before any SQL (a
        // PermanentError) fails alone, at once, instead of rolling back a group. The rendered SQL does
        // not depend on the connection it is sent on.
        effect = build(db, event.subject.object, { provider: target.provider, endpoint: target.endpoint, eventId: event.id, eventType: event.type });
      } catch (err) {
        return Promise.reject(err);
      }
      const sendBy = options.statementTimeoutMs === undefined ? Infinity : Date.now() + options.statementTimeoutMs;
      // Not Promise.withResolvers: Node.js 20, a supported runtime, lacks it.
      const promise = new Promise<Outcome>((resolve, reject) => waiting.push({ target, event, sendBy, resolve, reject, effect }));
      pump();
      return promise;
    },
  };
}

/** Lock order: the subject's business key (its invoice, say), then the inbox key. */
function orderKey(delivery: Waiting): string {
  return `${delivery.event.subject.key ?? ""}\u0000${keyText(keyOf(delivery))}`;
}

function compare(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}
