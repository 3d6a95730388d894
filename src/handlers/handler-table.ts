import type { PendingQuery, Row } from "postgres";
import type { Db, Tx } from "../db/db.ts";
import { PermanentError } from "../errors.ts";
import { renderSteps, type RenderedSteps } from "./render-steps.ts";

/** What a handler knows about the event it applies, besides `data.object`. */
export interface HandlerContext {
  provider: string;
  endpoint: string;
  /** Provider event id (evt_…). */
  eventId: string;
  eventType: string;
  /**
   * The Stripe change this event carries, when it is not `eventId`: a thin event's `snapshot_event`
   * (the classic event of the same change). {@link changeOnce} claims it; undefined means `eventId`.
   */
  changeId?: string;
}

/**
 * A business handler: applies one event's object using only `tx` (it runs inside the inbox
 * transaction: receiveSync's `sql.begin` after the inbox insert, the worker's transaction after its
 * `FOR UPDATE` re-check, or a replay). This plain function is the default way to write one. It must be
 * idempotent and order-independent on its own (monotonic state transitions, business-key unique
 * constraints), because distinct Event objects can carry one business fact. It must not wait on the
 * network or on timers: the transaction holds the inbox row lock.
 * Throws to roll everything back; throws {@link PermanentError} when retrying cannot help.
 */
export interface Handler {
  (tx: Tx, object: Record<string, unknown>, context: HandlerContext): Promise<void>;
  /** Present on handlers made by {@link statementHandler}: its steps rendered as checked, prefixed CTEs. */
  readonly statement?: StatementBuilder;
  /** Present on handlers made by {@link statementHandler}: the steps as their author wrote them (to compose handlers in tests). */
  readonly steps?: StepsBuilder;
}

/** One step of a statement handler: the body of one CTE (`insert …`, `update …`, `select …`). */
export type Step = PendingQuery<Row[]>;

/** A statement handler's steps by name, in the order they are written. */
export type Steps = Readonly<Record<string, Step>>;

/** What a {@link StepsBuilder} may use besides its arguments. */
export interface StepHelpers {
  /** The CTE of another step of the same handler, to read its RETURNING rows: `from ${step("paid")}`. */
  step(name: string): Step;
  /**
   * `exists (select 1 from inbox)`: true when this statement has work to do. Optional: the framework
   * already rolls back every step's writes when it has none; a step may still test it to do nothing
   * at all on a duplicate (cheaper than writing and rolling back).
   */
  gate: Step;
}

/**
 * Builds a handler's whole effect as named steps of ONE statement: `{ paid: sql\`insert …\`, booked:
 * sql\`insert … select … from ${step("paid")}\` }`. Step names are lowercase identifiers; the framework
 * renders them as CTEs named `h_<name>`, so they never clash with its own (`inbox`, `done`). Rules the
 * framework enforces: a step starts (after comments, whitespace and `(`) with `select`, `values`,
 * `insert into`, `update`, `delete from` or `merge into`, a write naming its table literally (anything
 * else, its own `with` included, is refused); a write ends with a RETURNING clause (the framework reads it to see whether the step wrote); steps' writes survive only when the inbox
 * insert (sync) or re-check (worker) found work to do (else the statement fails with WI001 and rolls
 * back); no two steps write the same table (one snapshot per statement: an update cannot see a row
 * inserted by another step, and does nothing). Validation
 * happens in JS before any step is built (throw PermanentError there). Values are bound parameters
 * with explicit casts. Returning `{}` applies nothing (the event is still recorded as processed).
 */
export type StepsBuilder = (sql: Db | Tx, object: Record<string, unknown>, context: HandlerContext, helpers: StepHelpers) => Steps;

/**
 * A statement handler's steps rendered for one event (render-steps.ts): `ctes`, the comma-separated
 * CTE list `h_a as (…), …` (no leading `with`, never empty) that reads the caller's CTE `inbox`, and
 * `wrote`, the expression "a step wrote a row". Receive, worker and batch splice `ctes` between their
 * `inbox` CTE and their final select, which must be the gate of sql/0012:
 * `case when exists (select 1 from inbox) then true when not (${wrote}) then false else
 * webhook_inbox_ungated() end`.
 * @throws HandlerDefinitionError when the steps break a rule (see {@link StepsBuilder}).
 */
export type StatementBuilder = (sql: Db | Tx, object: Record<string, unknown>, context: HandlerContext) => RenderedSteps;

/**
 * Makes a {@link Handler} from named steps (see {@link StepsBuilder}): the optional fast path. `name`
 * identifies the handler in errors. Called as a function (a plain-handler caller, replay, tests) it
 * runs the steps with an always-open gate (`inbox as (select 1)`) on the transaction it is given; the
 * sync receiver runs them in the same statement as the inbox insert (inbox.ts `recordAndApply`), the
 * worker in the same statement as its re-check (process-claimed.ts `claimedStatement`).
 */
export function statementHandler(name: string, build: StepsBuilder): Handler {
  const statement = renderSteps(name, build);
  const run = async (tx: Tx, object: Record<string, unknown>, context: HandlerContext): Promise<void> => {
    await tx`
      with inbox as (select 1), ${statement(tx, object, context).ctes}
      select 1
    `;
  };
  return Object.assign(run, { statement, steps: build });
}

/** Handlers throw it for a failure no retry can fix; defined with the other shared errors. */
export { PermanentError };

/** Event type → handler. Types without an entry are recorded as `ignored`. */
export type HandlerTable = Readonly<Record<string, Handler>>;
