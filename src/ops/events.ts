import { sqlState, SQLSTATE, type Db, type Tx } from "../db/db.ts";
import { containing, whereRows, type RowFilter, type RowState } from "./filter.ts";

/** One inbox row's metadata, as operators see it. Times are ISO 8601 strings. */
export interface EventSummary {
  provider: string;
  endpoint: string;
  eventId: string;
  eventType: string;
  /** The connected account the event belongs to (`acct_…`), `""` for the platform's own (sql/0021). */
  account: string;
  state: RowState;
  attempts: number;
  receivedAt: string;
  availableAt: string;
  processedAt: string | null;
  needsReviewAt: string | null;
  lastError: string | null;
  payloadDropped: boolean;
}

interface Row {
  provider: string;
  endpoint: string;
  event_id: string;
  event_type: string;
  account: string;
  state: RowState;
  attempts: number;
  received_at: Date;
  available_at: Date;
  processed_at: Date | null;
  needs_review_at: Date | null;
  last_error: string | null;
  payload_dropped: boolean;
}

function summarize(r: Row): EventSummary {
  return {
    provider: r.provider,
    endpoint: r.endpoint,
    eventId: r.event_id,
    eventType: r.event_type,
    account: r.account,
    state: r.state,
    attempts: r.attempts,
    receivedAt: r.received_at.toISOString(),
    availableAt: r.available_at.toISOString(),
    processedAt: r.processed_at?.toISOString() ?? null,
    needsReviewAt: r.needs_review_at?.toISOString() ?? null,
    lastError: r.last_error,
    payloadDropped: r.payload_dropped,
  };
}

/** Inbox rows matching `filter`, newest first, at most `limit` (default 50). Never the payloads. */
export async function listEvents(db: Db, filter: RowFilter, limit = 50): Promise<EventSummary[]> {
  return (await pageEvents(db, filter, { limit })).rows;
}

/**
 * Where a page of {@link pageEvents} starts: the (received_at in µs since the epoch, provider,
 * endpoint, event_id) of the last row of the page before, as an opaque string.
 */
export type EventCursor = string;

/** Options of {@link pageEvents}. */
export interface PageOptions {
  /** Rows per page; default 50. */
  limit?: number;
  /** Rows strictly older than this cursor (the `next` of the page before). */
  after?: EventCursor;
  /** Text the stored payload (or the raw body of an unstorable event) contains, case-insensitive. */
  text?: string;
  /** With `text`: rows read at most; default {@link TEXT_SCAN_ROWS}. */
  scanRows?: number;
  /**
   * Longest the page's query may run, ms (a server-side `statement_timeout` for its transaction).
   * Unset: no bound. A filter that matches almost nothing among settled rows (attempts or an error
   * text without a state, a type that never arrived) makes PostgreSQL read the received_at index to
   * its end; this bounds it.
   */
  maxMs?: number;
}

/** Thrown by {@link pageEvents} when `maxMs` passed: the filter must be narrowed. */
export class PageTooSlowError extends Error {
  constructor(ms: number) {
    super(`Cannot list these rows within ${ms} ms: the filter matches too few of the rows it reads; narrow it with since, state or type`);
    this.name = "PageTooSlowError";
  }
}

/** One page of {@link pageEvents}. */
export interface EventPage {
  rows: EventSummary[];
  /** Cursor of the next (older) page; null at the end. */
  next: EventCursor | null;
  /** With `text`: how many rows this page's search read (at most {@link TEXT_SCAN_ROWS}). */
  scanned?: number;
}

/**
 * Rows a payload text search reads per page: the newest rows that match the other filters past the
 * cursor. A search never reads the whole table unasked; the next page continues from where it stopped.
 */
export const TEXT_SCAN_ROWS = 10_000;

/**
 * One page of inbox rows matching `filter`, newest first (`received_at desc`, then provider,
 * endpoint and event id descending), by keyset: the page after `options.after` starts strictly below
 * its key, read from the `webhook_inbox_received_at` index (0004), so page 1 000 costs what page 1
 * does. With `options.text` only rows whose payload contains it are returned, and the search reads at
 * most `options.scanRows` ({@link TEXT_SCAN_ROWS}) rows (those matching the other filters); `next` then continues after the
 * last row read, so "older" pages search further back. Never returns payloads.
 * @throws Error when `options.after` is not a cursor this function made; {@link PageTooSlowError}
 *   past `options.maxMs`.
 */
export async function pageEvents(db: Db, filter: RowFilter, options: PageOptions = {}): Promise<EventPage> {
  const maxMs = options.maxMs;
  if (maxMs === undefined) return readPage(db, filter, options);
  try {
    return (await db.begin(async (tx) => {
      await tx`select set_config('statement_timeout', ${String(maxMs)}, true)`;
      return readPage(tx, filter, options);
    })) as EventPage;
  } catch (err) {
    if (sqlState(err) === SQLSTATE.queryCanceled) throw new PageTooSlowError(maxMs);
    throw err;
  }
}

async function readPage(db: Db | Tx, filter: RowFilter, options: PageOptions): Promise<EventPage> {
  const limit = options.limit ?? 50;
  const after = options.after === undefined ? undefined : readCursor(options.after);
  const older = after
    ? db`and (received_at, provider, endpoint, event_id) < ('epoch'::timestamptz + ${after[0]}::bigint * interval '1 microsecond', ${after[1]}, ${after[2]}, ${after[3]})`
    : db``;
  const scan = options.text === undefined ? limit + 1 : (options.scanRows ?? TEXT_SCAN_ROWS);
  const rows = await db<(Row & { key: string; hit: boolean })[]>`
    with scanned as (
      select provider, endpoint, event_id, event_type, account, state, attempts, received_at, available_at,
             processed_at, needs_review_at, last_error,
             (extract(epoch from received_at) * 1000000)::bigint::text as key
        from webhook_inbox_state
       where ${whereRows(db, filter)}
             ${older}
       order by received_at desc, provider desc, endpoint desc, event_id desc
       limit ${scan}
    )
    -- One primary-key lookup of each scanned row's payload (its key and received_at name one payload
    -- row in one partition): "offset 0" keeps the planner from turning it into a join, which it may run
    -- as a hash join over every payload of the table.
    select s.*, p.payload_dropped, ${options.text === undefined ? db`true` : db`coalesce(p.hit, false)`} as hit
      from scanned s
      left join lateral (
        select count(*) = 0 as payload_dropped,
               ${options.text === undefined ? db`null::boolean` : db`bool_or(coalesce(w.payload::text, w.raw_body) ilike ${containing(options.text)})`} as hit
          from webhook_inbox_payloads w
         where (w.provider, w.endpoint, w.event_id, w.received_at) = (s.provider, s.endpoint, s.event_id, s.received_at)
        offset 0
      ) p on true
     order by s.received_at desc, s.provider desc, s.endpoint desc, s.event_id desc
  `;
  const hits = rows.filter((r) => r.hit);
  const page = hits.slice(0, limit);
  const last = hits.length > limit ? page.at(-1) : rows.length === scan ? rows.at(-1) : undefined;
  const next = last ? makeCursor(last) : null;
  return options.text === undefined ? { rows: page.map(summarize), next } : { rows: page.map(summarize), next, scanned: rows.length };
}

function makeCursor(r: Row & { key: string }): EventCursor {
  return btoa(JSON.stringify([r.key, r.provider, r.endpoint, r.event_id]))
    .replaceAll("+", "-")
    .replaceAll("/", "_")
    .replaceAll("=", "");
}

function readCursor(cursor: EventCursor): [string, string, string, string] {
  try {
    const value: unknown = JSON.parse(atob(cursor.replaceAll("-", "+").replaceAll("_", "/")));
    if (Array.isArray(value) && value.length === 4 && /^-?\d{1,19}$/.test(String(value[0])) && value.every((v) => typeof v === "string"))
      return value as [string, string, string, string];
  } catch {
    // Reported below.
  }
  throw new Error("Cannot read the page cursor: start again from the first page");
}

/**
 * Every row of `eventId` (one per provider and endpoint that received it), with its resolution note
 * (null unless an operator resolved it), and its payload when
 * `withPayload` is set (null once dropped by retention). An event PostgreSQL could not store as jsonb
 * (0006) has payload null, one stored from a sanitized copy (0010) a payload too, and on request
 * `rawBody`: the exact verified body as text. Empty when the
 * id is unknown.
 */
export async function showEvent(
  db: Db,
  eventId: string,
  withPayload = false,
): Promise<(EventSummary & { resolutionNote: string | null; payload?: unknown; rawBody?: string })[]> {
  const rows = await db<(Row & { resolution_note: string | null; payload: unknown; raw_body: string | null })[]>`
    select s.provider, s.endpoint, s.event_id, s.event_type, s.account, s.state, s.attempts, s.received_at, s.available_at,
           s.processed_at, s.needs_review_at, s.last_error, s.resolution_note,
           p.received_at is null as payload_dropped,
           case when ${withPayload} then p.payload end as payload,
           case when ${withPayload} then p.raw_body end as raw_body
      from webhook_inbox_state s
      left join webhook_inbox_payloads p using (provider, endpoint, event_id, received_at)
     where s.event_id = ${eventId}
     order by s.provider, s.endpoint
  `;
  return rows.map((r) => {
    const row = { ...summarize(r), resolutionNote: r.resolution_note };
    if (!withPayload) return row;
    return r.raw_body === null ? { ...row, payload: r.payload } : { ...row, payload: r.payload, rawBody: r.raw_body };
  });
}
