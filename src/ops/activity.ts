import type { Db } from "../db/db.ts";

/** Rows received by one endpoint in one minute, by their state now. */
export interface MinuteActivity {
  provider: string;
  endpoint: string;
  /** Start of the minute, ISO 8601. */
  minute: string;
  processed: number;
  ignored: number;
  resolved: number;
  unprocessed: number;
  needsReview: number;
  /** Events of the endpoint's other mode (test at a live endpoint, or the reverse): recorded, never applied. */
  ignoredMode: number;
}

/**
 * Inbox rows received per endpoint and minute over the last `minutes` minutes (default 60), counted
 * by each row's state now (from `received_at` and the row's state, read through the
 * `webhook_inbox_received_at` index): only minutes with arrivals are returned, oldest first.
 * Duplicates are not rows and so are not here (the receiver counts them in memory, see /metrics).
 */
export async function activityPerMinute(db: Db, minutes = 60): Promise<MinuteActivity[]> {
  const rows = await db<(Omit<MinuteActivity, "minute"> & { minute: Date })[]>`
    select provider, endpoint, date_trunc('minute', received_at) as minute,
           count(*) filter (where state = 'processed')::int as processed,
           count(*) filter (where state = 'ignored')::int as ignored,
           count(*) filter (where state = 'resolved')::int as resolved,
           count(*) filter (where state = 'unprocessed')::int as unprocessed,
           count(*) filter (where state = 'needs_review')::int as "needsReview",
           count(*) filter (where state = 'ignored_mode')::int as "ignoredMode"
      from webhook_inbox_state
     where received_at >= date_trunc('minute', now()) - ${minutes - 1} * interval '1 minute'
     group by provider, endpoint, minute
     order by provider, endpoint, minute
  `;
  return rows.map((r) => ({ ...r, minute: r.minute.toISOString() }));
}
