import { beginWithin, boundTransaction, settleWithin, sqlState, SQLSTATE, STUCK_SLACK_MS, type Db, type Tx } from "../db/db.ts";
import type { VerifiedEvent } from "../providers/provider.ts";
import { PermanentError } from "../errors.ts";
import { retry } from "../retry.ts";
import { inboxRow, insertInbox, keyIs, keyText, type InboxKey, type InboxRow } from "./inbox.ts";
import { EndpointPaused, PAUSE_LOCK, pausedBy } from "./pauses.ts";
import { keepPartitionsAfterSpill } from "./partitions.ts";
import { notifierFor, OUTBOX_CHANNEL } from "./notifier.ts";

/** What a handler knows about the event it applies, besides the object. */
export interface HandlerContext {
  provider: string;
  endpoint: string;
  /** Provider event id (evt_…), or a reconcile repair's key. */
  eventId: string;
  eventType: string;
  /**
   * The Stripe change this event carries, when it is not `eventId`: a thin event's `snapshot_event`
   * (the classic event of the same change). changeOnce claims it; undefined means `eventId`.
   */
  changeId?: string;
  /**
   * The Stripe account the event belongs to: a connected account's id (`acct_…`, the event's
   * `account` field, Stripe docs "Connect webhooks") or `""` for the platform's own events (and for
   * providers without accounts). Business tables key their rows by it, so the same object id under two
   * accounts never collides. Undefined is read as `""`.
   */
  account?: string;
}

/**
 * A business handler: applies one event's object inside the inbox transaction, using only `tx` for
 * every statement and awaiting each one (a postgres.js query that is never awaited is never sent:
 * applyEvent refuses a handler that returns with such a query, as a PermanentError, so a forgotten
 * `await` parks the event instead of settling it without that write).
 * It runs only when the transaction holds work to do (the inbox insert inserted, or the worker's
 * `FOR UPDATE` re-check found the row unsettled: inbox/apply-event.ts), and its writes commit with
 * the inbox row or not at all. It must still be idempotent and order-independent on its own
 * (monotonic state transitions, business-key unique constraints such as `ledger_entries unique
 * (invoice_id, kind)`), because two distinct Event objects can carry one business fact. It must not
 * wait on the network or on timers: the transaction holds row locks. A handler may write one clever
 * statement or several plain ones; the framework runs whatever it sends.
 * Throws to roll everything back: a {@link PermanentError} when no retry can help (the event is
 * parked as needs-review), anything else for a retry (a 5xx to the provider, or the worker's backoff).
 * Follows graphile-worker's "a task is an async function" (website/docs/tasks.md).
 */
export type Handler = (tx: Tx, object: Record<string, unknown>, context: HandlerContext) => Promise<void>;

/** Event type → handler (built and checked by handlers/handler-table.ts `handlerTable`). Types without an entry are recorded as `ignored`. */
export type HandlerTable = Readonly<Record<string, Handler>>;

/**
 * What applying an event came to: `processed` (its handler ran and committed with its inbox row),
 * `ignored` (no handler for its type: settled, so a redelivery is a duplicate), `queued` (recorded
 * for a worker, nothing applied), `duplicate` (its inbox row was already recorded, or already
 * settled by someone else: nothing ran).
 */
export type Applied = "processed" | "ignored" | "queued" | "duplicate";

/**
 * How the transaction holds the event's inbox row before its handler may run:
 * - `insert`: records `event` under the key (`insert … on conflict do nothing`), settled, and its handler
 *   runs when this transaction inserted it; with `queue`, or when its endpoint (or account) is paused
 *   (`endpoint_pauses`, checked in the insert), it is recorded for a worker and nothing runs (`queued`; a
 *   type without a handler is recorded `ignored` either way).
 * - `record`: inserts `row` as it is, for a worker or an operator (`settled` null: an attempt that
 *   already failed, or an event kept as its raw body: inbox.ts `rawOnlyRow`); nothing runs.
 * - `claimed`: the row a worker claimed is settled (processed or ignored) by one `update … where
 *   processed_at is null and needs_review_at is null`, which locks it and re-checks it in one round
 *   trip (another worker, a redelivery's settle or an operator may have settled it: then nothing
 *   runs); the handler then runs in the same transaction, so its failure rolls the settle back.
 * - `replay`: a settled row (not resolved by an operator, not `ignored_mode` unless `modeFixed`: the
 *   endpoint's mode now is the event's) runs through its handler again, locked `FOR UPDATE`; it stays
 *   settled, and a row recorded `ignored` (or `ignored_mode`) whose type has a handler now is marked
 *   `processed` (ops/replay.ts); a row of a paused endpoint or account throws {@link EndpointPaused}.
 * Every hold that may run a handler (`insert` without `queue`, `claimed`, `replay`) first takes its
 * endpoint's pause lock SHARED (pauses.ts `PAUSE_LOCK`, taken by boundTransaction in the transaction's first statement), so a
 * pause commits only once no transaction is applying an event of that endpoint, and the hold's own
 * statement sees a pause committed before it.
 */
export type Hold =
  { insert: VerifiedEvent; queue?: boolean } | { record: InboxRow } | { claimed: true } | { replay: true; modeFixed?: boolean };

/** What {@link applyEvent} applies. */
export interface ApplyInput {
  key: InboxKey;
  /** The endpoint's handler table; `type` picks the handler. */
  handlers: HandlerTable;
  /** The handler's event type (the table's key). */
  type: string;
  /** The object the handler applies (Stripe: `data.object`, or the object read from the API). */
  object: Record<string, unknown>;
  /** The change this event carries when it is another event's (a thin event's snapshot event), for `changeOnce`. */
  changeId?: string;
  /**
   * The Stripe account the event belongs to ({@link HandlerContext.account}): the inbox row's `account`
   * for a claimed or replayed row. Undefined: the inserted event's own `account`, else `""` (the platform).
   */
  account?: string;
  hold: Hold;
  /**
   * The time bound, ms: PostgreSQL's `statement_timeout` (lock waits included) and
   * `idle_in_transaction_session_timeout` for every statement of the transaction, set inside it, so
   * a process killed or stalled mid-transaction leaves nothing running past it (PostgreSQL manual,
   * "Client Connection Defaults"). A try after a conflict gets what is left of it.
   */
  timeoutMs: number;
  /**
   * W3C traceparent of the span applying the event (src/telemetry.ts): outbox rows the handler writes
   * carry it (boundTransaction); undefined when tracing is off.
   */
  traceparent?: string;
  /** Runs in the transaction before the handler (after the row is held). */
  before?: (tx: Tx) => Promise<void>;
  /** Runs in the transaction after the handler, whatever the outcome (a duplicate too); throwing rolls everything back. */
  after?: (tx: Tx, applied: Applied) => Promise<void>;
}

/**
 * Thrown by a `replay` hold (and by ops/replay.ts before it) for a row that cannot be replayed as it is
 * now: gone, not settled yet (the worker owns it), needs-review, resolved by an operator, recorded
 * `ignored_mode` while its mode still differs, or its payload dropped by retention. Nothing ran.
 */
export class ReplayRefused extends Error {
  override name = "ReplayRefused";
}

/** Tries of a transaction PostgreSQL rolled back as a deadlock or serialization failure. */
export const APPLY_TRIES = 3;

/**
 * The one way an event is applied (seed §5.3, §6): in ONE `sql.begin` transaction, hold its inbox row
 * ({@link Hold}), run its handler with the same `tx` (a plain `(tx, object, context)` function: see
 * handlers/handler-table.ts), settle the row, commit. The inbox row and every write of the handler
 * commit together or not at all, so an event is never lost (no "processed" without the work) and
 * never applied twice (no work without "processed"). Used by sync and hybrid receive, the worker
 * (claimed rows, thin and refetch rows after their API read), event backfill, reconcile repairs and
 * replay.
 * A transaction PostgreSQL rolled back as a deadlock or serialization failure (40P01, 40001) is tried
 * again, up to {@link APPLY_TRIES} tries while time is left (PostgreSQL manual, 13.4 "Serialization
 * Failure Handling"): nothing of the failed try remains. After the commit, outbox dispatchers are
 * woken for a `processed` event (its handler may have written outbox rows) and workers for a
 * `queued` one (a coalesced NOTIFY sent after the commit: notifier.ts).
 * @throws whatever the handler or the database threw, after the rollback: nothing of the attempt
 *   remains; {@link ReplayRefused} for a `replay` of a row that is not settled, was resolved by an operator, or is gone;
 *   {@link EndpointPaused} for a `claimed` or `replay` row whose endpoint or account is paused.
 */
export async function applyEvent(db: Db, input: ApplyInput): Promise<Applied> {
  const [applied] = await applyEvents(db, [input], input.timeoutMs);
  return applied!;
}

/**
 * Several events of one delivery (Adyen's batch) applied as {@link applyEvent} applies one, all in ONE
 * transaction bounded by `timeoutMs` (each input's own `timeoutMs` is not read): every inbox row and
 * every handler's writes commit together or not at all, in the order given (callers sort by key, so
 * two batches holding the same keys wait for each other instead of deadlocking; a deadlock or
 * serialization failure is tried again as in applyEvent). Returns each input's outcome, in order.
 * `onFailure` is told the index of the input whose hold or handler threw, before the rollback.
 * @throws whatever an input's handler or the database threw, after the rollback: nothing of the delivery remains.
 */
export async function applyEvents(
  db: Db,
  inputs: readonly ApplyInput[],
  timeoutMs: number,
  onFailure?: (index: number) => void,
): Promise<Applied[]> {
  const deadline = Date.now() + timeoutMs;
  const spill = { spilled: false };
  const applied = await settleWithin(
    retry(
      () =>
        beginWithin(db, deadline, "The inbox transaction", async (tx) => {
          await boundTransaction(tx, deadline - Date.now(), inputs[0]?.traceparent, { key: PAUSE_LOCK, names: applyingEndpoints(inputs) });
          const out: Applied[] = [];
          for (const [i, input] of inputs.entries()) {
            try {
              out.push(await applyIn(tx, input, spill));
            } catch (err) {
              onFailure?.(i);
              throw err;
            }
          }
          return out;
        }),
      { tries: APPLY_TRIES, retryable: (err) => (isConflict(err) && Date.now() < deadline ? String(sqlState(err)) : undefined) },
    ),
    timeoutMs + STUCK_SLACK_MS,
    "The inbox transaction",
  );
  if (applied.includes("processed")) notifierFor(db, OUTBOX_CHANNEL).wake();
  if (applied.includes("queued")) notifierFor(db).wake();
  keepPartitionsAfterSpill(db, spill);
  return applied;
}

/** What one event of {@link applyEach} came to. */
export type EachOutcome =
  /** Its hold and handler ran and were kept (released into the batch's transaction). */
  | { applied: Applied }
  /** Its hold or handler threw: its savepoint was rolled back, nothing of it remains; the others are kept. */
  | { error: unknown }
  /** The batch's time ran out before it: nothing of it ran. */
  | { notStarted: true };

/** An event of {@link applyEach} starts only while at least this share of the batch's bound is left. */
const EACH_START_SHARE = 0.1;

/**
 * Independent events applied in ONE transaction, each exactly as {@link applyEvent} applies it (its
 * {@link Hold}, its handler, its settle) behind a savepoint of its own (postgres.js `savepoint`;
 * PostgreSQL manual, SAVEPOINT and ROLLBACK TO SAVEPOINT): an event that throws is rolled back to its
 * savepoint alone and the others commit, with one COMMIT (one WAL flush) for them all. The worker's batches (worker/process-batch.ts).
 * - Bound: the transaction gets `timeoutMs` (boundTransaction); as each event starts, its statements'
 *   `statement_timeout` is set to what is left of `timeoutMs`, and an event starts only while a tenth
 *   of it is left, so a lock wait or a slow statement of one event is cancelled at the batch's deadline
 *   (57014, that event's error) and the events after it are `notStarted`.
 * - Conflicts: an event PostgreSQL rolled back as a deadlock or serialization failure (40P01, 40001)
 *   is rolled back to its savepoint and tried again, up to {@link APPLY_TRIES} tries while time is left.
 * - Each input's `traceparent` is set for its own statements (outbox rows carry it).
 * - `settle(tx, outcomes)` runs last in the same transaction (the worker records the failures and
 *   gives back the attempts of the events not started), so what the batch did and what it recorded
 *   of it commit together.
 * Returns each input's outcome, in order. After the commit, dispatchers are woken when an event was processed.
 * @throws what the database threw outside an event (BEGIN, the bound, a ROLLBACK TO SAVEPOINT, `settle`,
 *   COMMIT), or QUERY_STUCK after `timeoutMs` + STUCK_SLACK_MS: nothing of the batch remains then.
 */
export async function applyEach(
  db: Db,
  inputs: readonly ApplyInput[],
  timeoutMs: number,
  settle?: (tx: Tx, outcomes: readonly EachOutcome[]) => Promise<void>,
): Promise<EachOutcome[]> {
  const deadline = Date.now() + timeoutMs;
  const spill = { spilled: false };
  const outcomes = await settleWithin(
    beginWithin(db, deadline, "The batch's transaction", async (tx) => {
      await boundTransaction(tx, timeoutMs, "", { key: PAUSE_LOCK, names: applyingEndpoints(inputs) });
      const out: EachOutcome[] = [];
      for (const input of inputs) {
        for (let tries = 1; ; tries++) {
          const left = Math.ceil(deadline - Date.now());
          if (left < timeoutMs * EACH_START_SHARE) {
            out.push({ notStarted: true });
            break;
          }
          try {
            // postgres.js's savepoint scope: a failed statement in it rolls back to the savepoint and
            // rejects here, and only here (the transaction goes on).
            const applied = await tx.savepoint(async (sp) => {
              // This event's bound and trace, undone with its savepoint; pipelined with its first statement.
              const bound = sp`
                select set_config('statement_timeout', ${String(left)}, true), set_config('webhook_inbox.traceparent', ${input.traceparent ?? ""}, true)
              `.execute();
              const applied = await applyIn(sp, input, spill);
              await bound;
              return applied;
            });
            out.push({ applied });
            break;
          } catch (err) {
            if (isConflict(err) && tries < APPLY_TRIES && Date.now() < deadline) continue;
            out.push({ error: err });
            break;
          }
        }
      }
      await settle?.(tx, out);
      return out;
    }),
    timeoutMs + STUCK_SLACK_MS,
    "The batch's transaction",
  );
  if (outcomes.some((o) => "applied" in o && o.applied === "processed")) notifierFor(db, OUTBOX_CHANNEL).wake();
  keepPartitionsAfterSpill(db, spill);
  return outcomes;
}

/** The endpoints whose pause lock a transaction holding `inputs` takes: those of every hold that may run a handler. */
function applyingEndpoints(inputs: readonly ApplyInput[]): string[] {
  return inputs.filter(({ hold }) => !("record" in hold) && !("insert" in hold && hold.queue)).map((input) => input.key.endpoint);
}

async function applyIn(tx: Tx, input: ApplyInput, spill: { spilled: boolean }): Promise<Applied> {
  const handler = Object.hasOwn(input.handlers, input.type) ? input.handlers[input.type] : undefined;
  const held = await holdRow(tx, input, handler !== undefined, spill);
  if (held !== "held") {
    await input.after?.(tx, held);
    return held;
  }
  await input.before?.(tx);
  if (handler) {
    const { provider, endpoint, eventId } = input.key;
    const watched = watchQueries(tx);
    const account = input.account ?? ("insert" in input.hold ? input.hold.insert.account : undefined) ?? "";
    await handler(watched.tx, input.object, { provider, endpoint, eventId, eventType: input.type, changeId: input.changeId, account });
    const unsent = watched.unsent();
    if (unsent > 0)
      throw new PermanentError(
        `The ${input.type} handler built ${unsent} statement(s) it never awaited (postgres.js sends a query only when it is awaited): ` +
          "nothing of this event was applied; add the missing await, then requeue it",
      );
  }
  const applied = handler ? "processed" : "ignored";
  await input.after?.(tx, applied);
  // A replay that ran a handler added after the event was recorded `ignored`: the row now says so.
  if ("replay" in input.hold && handler) await markReplayedProcessed(tx, input.key);
  return applied;
}

/** Holds the row as `input.hold` says: "held" when the handler may run, else the outcome without it. */
async function holdRow(tx: Tx, input: ApplyInput, handled: boolean, spill: { spilled: boolean }): Promise<"held" | Applied> {
  const { key, hold } = input;
  if ("insert" in hold || "record" in hold) {
    const applying = !("record" in hold) && handled && !hold.queue;
    const row =
      "record" in hold
        ? hold.record
        : { ...inboxRow(key, hold.insert, !handled ? "ignored" : hold.queue ? null : "processed"), unlessPaused: applying };
    const inserted = await insertInbox(tx, [row]);
    spill.spilled ||= inserted.spilled;
    if (inserted.size === 0) return "duplicate";
    return row.settled === null || inserted.paused.has(keyText(key)) ? "queued" : "held";
  }
  const account = input.account ?? "";
  if ("claimed" in hold) {
    // The re-check and the settle in one statement: the row is locked and marked settled here, and the
    // handler's writes follow in the same transaction, so a handler that throws rolls the settle back too.
    // A pause committed since the claim (this transaction holds its lock) leaves the row as it is.
    const [done] = await tx<{ pausedBy: string | null; settled: number }[]>`
      with pause as (
        select ${pausedBy(tx, key.endpoint, account)} as by
      ), settled as (
        update webhook_inbox
           set processed_at = now(),
               outcome = ${handled ? "processed" : "ignored"},
               last_error = null
         where ${keyIs(tx, key)}
           and processed_at is null
           and needs_review_at is null
           and (select by from pause) is null
        returning 1
      )
      select (select by from pause) as "pausedBy", (select count(*) from settled)::int as settled
    `;
    if (done && done.pausedBy !== null) throw new EndpointPaused(key.endpoint, done.pausedBy);
    return done?.settled === 1 ? "held" : "duplicate";
  }
  const [row] = await tx<{ settled: boolean; parked: boolean; outcome: string | null; note: string | null; pausedBy: string | null }[]>`
    select processed_at is not null as settled, needs_review_at is not null as parked, outcome, resolution_note as note,
           ${pausedBy(tx, key.endpoint, account)} as "pausedBy"
      from webhook_inbox
     where ${keyIs(tx, key)}
       for update
  `;
  const name = `${key.eventId} at ${key.provider}/${key.endpoint}`;
  if (!row) throw new ReplayRefused(`Cannot replay ${name}: no such inbox row`);
  if (row.pausedBy !== null) throw new EndpointPaused(key.endpoint, row.pausedBy);
  if (row.parked)
    throw new ReplayRefused(`Cannot replay ${name}: it is needs-review, not processed (requeue it for the worker, or resolve it)`);
  if (!row.settled) throw new ReplayRefused(`Cannot replay ${name}: it is not processed yet (let the worker finish it)`);
  if (row.outcome === "ignored_mode" && !hold.modeFixed)
    throw new ReplayRefused(
      `Cannot replay ${name}: it was recorded ignored_mode (its livemode is not its endpoint's mode); if the endpoint's STRIPE_MODE was wrong, set it to the event's mode and replay it again`,
    );
  if (row.outcome === "resolved")
    throw new ReplayRefused(
      `Cannot replay ${name}: an operator resolved it by hand ("${row.note}"); running its handler would override that`,
    );
  return "held";
}

/** Turns a replayed row's `ignored` (or `ignored_mode`, its mode now fixed) into `processed`: its handler ran in this transaction. */
async function markReplayedProcessed(tx: Tx, key: InboxKey): Promise<void> {
  await tx`
    update webhook_inbox
       set outcome = 'processed'
     where ${keyIs(tx, key)}
       and outcome in ('ignored', 'ignored_mode')
  `;
}

/**
 * `tx` as a handler gets it, counting the queries it builds (`tx\`…\``, `tx.unsafe(…)`), so that
 * {@link applyEvent} can refuse a handler that returned with one never sent: postgres.js sends a query
 * only when it is awaited (or `.then`/`.execute` is called), so a forgotten `await` would otherwise
 * commit the event as processed without that write. A query built only to be embedded in another
 * (a fragment: `tx\`… ${tx\`and x\`}\``) is never sent by itself and is not counted.
 */
function watchQueries(tx: Tx): { tx: Tx; unsent(): number } {
  type Built = { executed?: boolean };
  const built: Built[] = [];
  const fragments = new Set<unknown>();
  const track = <T>(query: T, args: unknown[]): T => {
    for (const arg of args) for (const a of Array.isArray(arg) ? arg : [arg]) fragments.add(a);
    if (query && typeof query === "object" && "executed" in query) built.push(query as Built);
    return query;
  };
  const unsafe = (...args: Parameters<Tx["unsafe"]>) => track(tx.unsafe(...args), (args[1] as unknown[]) ?? []);
  const watched = new Proxy(tx, {
    apply: (target, self, args: unknown[]) => track(Reflect.apply(target as (...a: unknown[]) => unknown, self, args), args.slice(1)),
    get: (target, prop, receiver) => (prop === "unsafe" ? unsafe : Reflect.get(target, prop, receiver)),
  });
  return { tx: watched, unsent: () => built.filter((q) => !q.executed && !fragments.has(q)).length };
}

/** True for a rollback PostgreSQL chose because of a concurrent transaction (40P01, 40001): another try may succeed. */
export function isConflict(err: unknown): boolean {
  const state = sqlState(err);
  return state === SQLSTATE.deadlockDetected || state === SQLSTATE.serializationFailure;
}
