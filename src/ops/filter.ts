import type { Db, Tx } from "../db/db.ts";

export { parseDuration } from "../config.ts"; // the one duration parser, for `inbox` and the operator's page

/** A row's state, as the `webhook_inbox_state` view defines it (sql/0004_retention.sql, 0009_resolve.sql). */
export type RowState = "processed" | "ignored" | "ignored_mode" | "resolved" | "unprocessed" | "needs_review";

/** Which inbox rows an operator command applies to; every field narrows, none means all. */
export interface RowFilter {
  state?: RowState;
  /** Exact event id (evt_…). */
  eventId?: string;
  eventType?: string;
  endpoint?: string;
  provider?: string;
  /** The connected account (`acct_…`); `""` names the platform's own events (sql/0021). */
  account?: string;
  /** Received at or after this time. */
  since?: Date;
  /** Substring of `last_error` (case-insensitive). */
  error?: string;
  /** At least this many attempts (`attempts >= minAttempts`). */
  minAttempts?: number;
}

/**
 * The SQL condition for a filter, as a postgres.js fragment over `webhook_inbox_state`: every value
 * is a bound parameter.
 */
export function whereRows(db: Db | Tx, f: RowFilter) {
  const none = db``;
  return db`
    true
    ${f.state ? stateCondition(db, f.state) : none}
    ${f.eventId ? db`and event_id = ${f.eventId}` : none}
    ${f.eventType ? db`and event_type = ${f.eventType}` : none}
    ${f.endpoint ? db`and endpoint = ${f.endpoint}` : none}
    ${f.provider ? db`and provider = ${f.provider}` : none}
    ${f.account !== undefined ? db`and account = ${f.account}` : none}
    ${f.since ? db`and received_at >= ${f.since}` : none}
    ${f.error ? db`and last_error ilike ${containing(f.error)}` : none}
    ${f.minAttempts !== undefined ? db`and attempts >= ${f.minAttempts}` : none}
  `;
}

/**
 * `state = …` written on the view's columns, so PostgreSQL can use the partial indexes of 0003
 * (`needs_review_at`, the due rows) instead of evaluating the view's CASE on every row.
 */
function stateCondition(db: Db | Tx, state: RowState) {
  switch (state) {
    case "needs_review":
      return db`and processed_at is null and needs_review_at is not null`;
    case "unprocessed":
      return db`and processed_at is null and needs_review_at is null`;
    default:
      return db`and processed_at is not null and outcome = ${state}`;
  }
}

/** An `ilike` pattern matching `text` anywhere, its `\\`, `%` and `_` taken literally. */
export function containing(text: string): string {
  return "%" + text.replace(/[\\%_]/g, "\\$&") + "%";
}
