import type { Db, Tx } from "../db/db.ts";

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

/**
 * Parses a duration such as `30d`, `12h`, `90m`, `45s` or `500ms` into milliseconds.
 * @throws Error naming the value when it is not a positive whole number with one of those units, or is
 *   longer than 100 years.
 */
export function parseDuration(text: string): number {
  const match = /^(\d+)(ms|s|m|h|d)$/.exec(text.trim());
  if (!match?.[1] || !match[2] || Number(match[1]) === 0)
    throw new Error(`Cannot read duration "${text}": use a positive whole number with ms, s, m, h or d (e.g. 30d)`);
  const unit = { ms: 1, s: 1_000, m: 60_000, h: 3_600_000, d: 86_400_000 }[match[2] as "ms" | "s" | "m" | "h" | "d"];
  const ms = Number(match[1]) * unit;
  if (ms > MAX_DURATION_MS) throw new Error(`Cannot read duration "${text}": longer than 100 years`);
  return ms;
}

/** Longest duration {@link parseDuration} accepts: 100 years (PostgreSQL timestamps end in 294276 AD, but no retention needs more). */
const MAX_DURATION_MS = 36_500 * 86_400_000;
