import type { PendingQuery, Row } from "postgres";
import type { Db, Tx } from "../db/db.ts";
import { PermanentError } from "../errors.ts";

/** What a handler knows about the event it applies, besides `data.object`. */
export interface HandlerContext {
  provider: string;
  endpoint: string;
  /** Provider event id (evt_…). */
  eventId: string;
  eventType: string;
}

/**
 * A business handler: applies one event's `data.object` using only `tx` (it runs inside the inbox
 * transaction). It must be idempotent and order-independent on its own (monotonic state transitions,
 * business-key unique constraints), because distinct Event objects can carry one business fact.
 * It must not wait on the network or on timers: the transaction holds the inbox row lock.
 * Throws to roll everything back; throws {@link PermanentError} when retrying cannot help.
 */
export interface Handler {
  (tx: Tx, object: Record<string, unknown>, context: HandlerContext): Promise<void>;
  /** Present on handlers made by {@link statementHandler}: lets the sync receiver fold the handler into the inbox insert. */
  readonly statement?: StatementBuilder;
}

/**
 * Builds a handler's whole effect as common table expressions for ONE statement: a comma-separated
 * list `name as (…), …` (no leading `with`) that may read the CTE `inbox` and must change nothing
 * unless `exists (select 1 from inbox)`. Validation happens in JS before the fragment is built
 * (throw PermanentError there). Values are bound parameters with explicit casts.
 */
export type StatementBuilder = (sql: Db | Tx, object: Record<string, unknown>, context: HandlerContext) => PendingQuery<Row[]>;

/**
 * Makes a {@link Handler} from a {@link StatementBuilder}. Called as a function (worker, replay, tests)
 * it runs the CTEs with an always-open gate (`inbox as (select 1)`) on the transaction it is given;
 * the sync receiver instead runs them in the same statement as the inbox insert (see receive.ts):
 * one round trip, no BEGIN/COMMIT, for the whole Transactional Inbox.
 */
export function statementHandler(build: StatementBuilder): Handler {
  const run = async (tx: Tx, object: Record<string, unknown>, context: HandlerContext): Promise<void> => {
    await tx`
      with inbox as (select 1), ${build(tx, object, context)}
      select 1
    `;
  };
  return Object.assign(run, { statement: build });
}

/** Handlers throw it for a failure no retry can fix; defined with the other shared errors. */
export { PermanentError };

/** Event type → handler. Types without an entry are recorded as `ignored`. */
export type HandlerTable = Readonly<Record<string, Handler>>;
