// The events page's filter as it travels in a query string or a form, and back.
import { parseDuration, type RowFilter, type RowState } from "../ops/filter.ts";

const STATES: readonly RowState[] = ["needs_review", "unprocessed", "processed", "ignored", "ignored_mode", "resolved"];

/** A filter read from a request: the row filter, the payload text, and the problems found (each names its field). */
export interface AdminFilter {
  rows: RowFilter;
  /** Text the payload contains (bounded search, see `pageEvents`). */
  text?: string;
  problems: string[];
}

/**
 * Reads `state`, `type`, `endpoint`, `since` (a duration such as `2h`, counted back from `nowMs`,
 * or an ISO time), `attempts` (at least, a whole number), `id`, `account` (`acct_…`, or `platform` for
 * the platform's own events) and `text` from `params`; empty fields are unset. Problems are returned,
 * not thrown.
 */
export function readFilter(params: URLSearchParams, nowMs: number): AdminFilter {
  const problems: string[] = [];
  const get = (name: string): string | undefined => params.get(name)?.trim() || undefined;
  const rows: RowFilter = { eventType: get("type"), endpoint: get("endpoint"), eventId: get("id"), account: accountFilter(get("account")) };
  const state = get("state");
  if (state !== undefined) {
    if ((STATES as readonly string[]).includes(state)) rows.state = state as RowState;
    else problems.push(`state must be one of ${STATES.join(", ")}`);
  }
  const since = get("since");
  if (since !== undefined) {
    if (/^\d+(ms|s|m|h|d)$/.test(since)) {
      try {
        rows.since = new Date(nowMs - parseDuration(since));
      } catch (err) {
        problems.push(`since: ${(err as Error).message}`);
      }
    } else if (
      /^\d{4}-\d{2}-\d{2}([T ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:?\d{2})?)?$/.test(since) &&
      !Number.isNaN(Date.parse(since))
    ) {
      rows.since = new Date(since);
    } else {
      problems.push("since must be a duration (2h, 30m, 7d) or an ISO time (2026-12-01T09:00:00Z)");
    }
  }
  const attempts = get("attempts");
  if (attempts !== undefined) {
    if (/^\d{1,6}$/.test(attempts)) rows.minAttempts = Number(attempts);
    else problems.push("attempts must be a whole number ≥ 0");
  }
  for (const key of Object.keys(rows) as (keyof RowFilter)[]) if (rows[key] === undefined) delete rows[key];
  const text = get("text");
  return text === undefined ? { rows, problems } : { rows, text, problems };
}

/**
 * The query-string fields of a filter (`since` as an absolute ISO time, so a confirmation names the
 * same rows however long it waits), for links and hidden form fields.
 */
export function filterFields(filter: Pick<AdminFilter, "rows" | "text">): [string, string][] {
  const f = filter.rows;
  const fields: [string, string | undefined][] = [
    ["state", f.state],
    ["type", f.eventType],
    ["endpoint", f.endpoint],
    ["since", f.since?.toISOString()],
    ["attempts", f.minAttempts?.toString()],
    ["id", f.eventId],
    ["account", f.account === undefined ? undefined : f.account === "" ? PLATFORM : f.account],
    ["text", filter.text],
  ];
  return fields.filter((e): e is [string, string] => e[1] !== undefined);
}

/** The filter in words, for a confirmation page: "state needs_review, type invoice.paid"; "every row" when empty. */
export function describeFilter(filter: Pick<AdminFilter, "rows" | "text">): string {
  const parts = filterFields(filter).map(([k, v]) => (k === "attempts" ? `attempts ≥ ${v}` : `${k} ${v}`));
  return parts.length ? parts.join(", ") : "every row";
}

/** What the account filter takes for the platform's own events (account `""`): no Stripe account id is this word. */
export const PLATFORM = "platform";

/** An account filter as typed (`acct_…`, or {@link PLATFORM}) as the row filter takes it. */
export function accountFilter(value: string | undefined): string | undefined {
  return value === undefined ? undefined : value === PLATFORM ? "" : value;
}
