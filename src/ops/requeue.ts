import type { Db, Tx } from "../db/db.ts";
import { NOTIFY_CHANNEL } from "../inbox/inbox.ts";
import { whereRows, type RowFilter } from "./filter.ts";

/** The rows a requeue touched (or would touch, on a dry run). */
export interface RequeueResult {
  dryRun: boolean;
  rows: { provider: string; endpoint: string; eventId: string; eventType: string; attempts: number; lastError: string | null }[];
}

/**
 * Puts needs-review rows that match `filter` back in the queue: `needs_review_at`, `attempts` and `defers` reset,
 * due now, workers notified; `last_error` is kept for the record until the next attempt overwrites it.
 * Only needs-review rows are touched, whatever `filter.state` says. With `dryRun` nothing changes and
 * the rows that would be requeued are returned.
 */
export async function requeue(db: Db | Tx, filter: RowFilter, dryRun: boolean): Promise<RequeueResult> {
  const match = whereRows(db, { ...filter, state: "needs_review" });
  type Row = RequeueResult["rows"][number] & { notified?: string }; // the NOTIFY's column, not returned
  const rows = dryRun
    ? await db<Row[]>`
        select provider, endpoint, event_id as "eventId", event_type as "eventType", attempts, last_error as "lastError"
          from webhook_inbox_state
         where ${match}
         order by received_at
      `
    : await db<Row[]>`
        with picked as (
          select provider, endpoint, event_id, attempts
            from webhook_inbox_state
           where ${match}
        ), requeued as (
          update webhook_inbox w
             set needs_review_at = null,
                 attempts = 0,
                 defers = 0,
                 available_at = now()
            from picked p
           where (w.provider, w.endpoint, w.event_id) = (p.provider, p.endpoint, p.event_id)
             and w.processed_at is null
             and w.needs_review_at is not null
          returning w.provider, w.endpoint, w.event_id as "eventId", w.event_type as "eventType", p.attempts, w.last_error as "lastError"
        )
        select r.*, pg_notify(${NOTIFY_CHANNEL}, r.provider || '/' || r.endpoint)::text as notified
          from requeued r
      `;
  return { dryRun, rows: rows.map(({ notified: _, ...r }) => r) };
}
