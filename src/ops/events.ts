import type { Db } from "../db/db.ts";
import { whereRows, type RowFilter, type RowState } from "./filter.ts";

/** One inbox row's metadata, as operators see it. Times are ISO 8601 strings. */
export interface EventSummary {
  provider: string;
  endpoint: string;
  eventId: string;
  eventType: string;
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
  state: RowState;
  attempts: number;
  received_at: Date;
  available_at: Date;
  processed_at: Date | null;
  needs_review_at: Date | null;
  last_error: string | null;
  payload_dropped_at: Date | null;
}

function summarize(r: Row): EventSummary {
  return {
    provider: r.provider,
    endpoint: r.endpoint,
    eventId: r.event_id,
    eventType: r.event_type,
    state: r.state,
    attempts: r.attempts,
    receivedAt: r.received_at.toISOString(),
    availableAt: r.available_at.toISOString(),
    processedAt: r.processed_at?.toISOString() ?? null,
    needsReviewAt: r.needs_review_at?.toISOString() ?? null,
    lastError: r.last_error,
    payloadDropped: r.payload_dropped_at !== null,
  };
}

/** Inbox rows matching `filter`, newest first, at most `limit` (default 50). Never the payloads. */
export async function listEvents(db: Db, filter: RowFilter, limit = 50): Promise<EventSummary[]> {
  const rows = await db<Row[]>`
    select provider, endpoint, event_id, event_type, state, attempts, received_at, available_at,
           processed_at, needs_review_at, last_error, payload_dropped_at
      from webhook_inbox_state
     where ${whereRows(db, filter)}
     order by received_at desc, event_id
     limit ${limit}
  `;
  return rows.map(summarize);
}

/**
 * Every row of `eventId` (one per provider and endpoint that received it), with its payload when
 * `withPayload` is set (null once dropped by retention). An event PostgreSQL could not store as jsonb
 * (0006) has payload null, one stored from a sanitized copy (0010) a payload too, and on request
 * `rawBody`: the exact verified body as text. Empty when the
 * id is unknown.
 */
export async function showEvent(
  db: Db,
  eventId: string,
  withPayload = false,
): Promise<(EventSummary & { payload?: unknown; rawBody?: string })[]> {
  const rows = await db<(Row & { payload: unknown; raw_body: string | null })[]>`
    select s.provider, s.endpoint, s.event_id, s.event_type, s.state, s.attempts, s.received_at, s.available_at,
           s.processed_at, s.needs_review_at, s.last_error, s.payload_dropped_at,
           case when ${withPayload} then w.payload end as payload,
           case when ${withPayload} then w.raw_body end as raw_body
      from webhook_inbox_state s
      join webhook_inbox w using (provider, endpoint, event_id)
     where s.event_id = ${eventId}
     order by s.provider, s.endpoint
  `;
  return rows.map((r) => {
    if (!withPayload) return summarize(r);
    return r.raw_body === null ? { ...summarize(r), payload: r.payload } : { ...summarize(r), payload: r.payload, rawBody: r.raw_body };
  });
}
