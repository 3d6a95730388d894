import type { Db } from "../db/db.ts";

/** One unpublished outbox row as operators see it. Times are ISO 8601 strings; never the payload. */
export interface OutboxSummary {
  /** `outbox.id` (bigint) as text. */
  id: string;
  aggregateType: string;
  aggregateId: string;
  eventType: string;
  /** `pending`: waiting for a dispatcher (maybe backing off); `needs_review`: parked for an operator. */
  state: "pending" | "needs_review";
  /** Delivery attempts so far, counted at claim time (0005). */
  attempts: number;
  createdAt: string;
  availableAt: string;
  needsReviewAt: string | null;
  lastError: string | null;
}

/** Which unpublished outbox rows {@link listOutbox} returns. */
export interface OutboxFilter {
  /** Only parked rows. */
  needsReview?: boolean;
  /** Only these ids (bigint as text). */
  ids?: readonly string[];
}

/**
 * Unpublished outbox rows (published ones are history, not work), oldest first, at most `limit`
 * (default 50): the operator's view of what the dispatcher (`bun run dispatch`) still owes downstream
 * systems. Throws postgres.js errors only (an id that is not a whole number is SQLSTATE 22P02).
 */
export async function listOutbox(db: Db, filter: OutboxFilter = {}, limit = 50): Promise<OutboxSummary[]> {
  const rows = await db<
    {
      id: string;
      aggregate_type: string;
      aggregate_id: string;
      event_type: string;
      parked: boolean;
      attempts: number;
      created_at: Date;
      available_at: Date;
      needs_review_at: Date | null;
      last_error: string | null;
    }[]
  >`
    select id::text as id, aggregate_type, aggregate_id, event_type, needs_review_at is not null as parked,
           attempts, created_at, available_at, needs_review_at, last_error
      from outbox
     where published_at is null
       and (${!filter.needsReview} or needs_review_at is not null)
       and (${filter.ids === undefined} or id = any(${(filter.ids ?? []) as string[]}::bigint[]))
     order by outbox.id
     limit ${limit}
  `;
  return rows.map((r) => ({
    id: r.id,
    aggregateType: r.aggregate_type,
    aggregateId: r.aggregate_id,
    eventType: r.event_type,
    state: r.parked ? "needs_review" : "pending",
    attempts: r.attempts,
    createdAt: r.created_at.toISOString(),
    availableAt: r.available_at.toISOString(),
    needsReviewAt: r.needs_review_at?.toISOString() ?? null,
    lastError: r.last_error,
  }));
}
