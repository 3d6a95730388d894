import type { Db } from "../db/db.ts";
import { OUTBOX_CHANNEL } from "../inbox/notifier.ts";

/** One unpublished outbox row as operators see it. Times are ISO 8601 strings; never the payload. */
export interface OutboxSummary {
  /** `outbox.id` (bigint) as text. */
  id: string;
  aggregateType: string;
  aggregateId: string;
  eventType: string;
  /** The connected account the message is about (`acct_…`), `""` for the platform's own (sql/0021). */
  account: string;
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
  type Row = Omit<OutboxSummary, "createdAt" | "availableAt" | "needsReviewAt"> & {
    createdAt: Date;
    availableAt: Date;
    needsReviewAt: Date | null;
  };
  const rows = await db<Row[]>`
    select id::text as id, aggregate_type as "aggregateType", aggregate_id as "aggregateId", event_type as "eventType", account,
           case when needs_review_at is null then 'pending' else 'needs_review' end as state, attempts,
           created_at as "createdAt", available_at as "availableAt", needs_review_at as "needsReviewAt", last_error as "lastError"
      from outbox
     where published_at is null
       and (${!filter.needsReview} or needs_review_at is not null)
       and (${filter.ids === undefined} or id = any(${(filter.ids ?? []) as string[]}::bigint[]))
     order by outbox.id
     limit ${limit}
  `;
  return rows.map((r) => ({
    ...r,
    createdAt: r.createdAt.toISOString(),
    availableAt: r.availableAt.toISOString(),
    needsReviewAt: r.needsReviewAt?.toISOString() ?? null,
  }));
}

/** Unpublished outbox messages of one type (`event_type`, e.g. InvoicePaymentBooked). Age in seconds. */
export interface OutboxTypeBacklog {
  eventType: string;
  pending: number;
  needsReview: number;
  /** Seconds since the oldest unpublished message of the type was written. */
  oldestAgeSec: number;
}

/**
 * The unpublished outbox by message type, most waiting first: what the sinks still owe (a handler sink
 * routes by type). Reads the unpublished rows only (the partial index of 0021), so its cost follows the
 * backlog, not the table.
 */
export async function outboxByType(db: Db): Promise<OutboxTypeBacklog[]> {
  const rows = await db<OutboxTypeBacklog[]>`
    select event_type as "eventType",
           count(*) filter (where needs_review_at is null)::int as pending,
           count(*) filter (where needs_review_at is not null)::int as "needsReview",
           extract(epoch from now() - min(created_at))::float8 as "oldestAgeSec"
      from outbox
     where published_at is null
     group by event_type
     order by count(*) desc, event_type
  `;
  return [...rows];
}

/**
 * Puts parked (needs-review) outbox rows back in the queue after an operator fixed the cause:
 * `needs_review_at` and `attempts` reset, due now, dispatchers notified; `last_error` is kept until
 * the next attempt overwrites it. Only parked, unpublished rows among `ids` (bigints as text) are
 * touched. Returns the ids requeued, ascending. Used by `inbox outbox-requeue` and the operator's page.
 */
export async function requeueOutbox(db: Db, ids: readonly string[]): Promise<string[]> {
  const rows = await db<{ id: string }[]>`
    with requeued as (
      update outbox
         set needs_review_at = null,
             attempts = 0,
             available_at = now()
       where id = any(${ids as string[]}::bigint[])
         and needs_review_at is not null
         and published_at is null
      returning id
    )
    select id::text as id, pg_notify(${OUTBOX_CHANNEL}, '')::text as notified
      from requeued
     order by requeued.id
  `;
  return rows.map((r) => r.id);
}
