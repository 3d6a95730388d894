import type { Db, Tx } from "../db/db.ts";
import { whereRows, type RowFilter } from "./filter.ts";

/** The rows a resolve settled (or would settle, on a dry run). */
export interface ResolveResult {
  dryRun: boolean;
  rows: { provider: string; endpoint: string; eventId: string; eventType: string; lastError: string | null }[];
}

/**
 * Closes needs-review rows that match `filter` after an operator settled them by hand (e.g. booked
 * or refunded a refused payment after reconciling with Stripe): `processed_at = now()`, outcome
 * `resolved`, `resolution_note = note` (0009), `needs_review_at` cleared (a parked row is never
 * settled, 0003); `last_error` stays as the record of why it was parked.
 * The row leaves the needs-review backlog, a redelivery of the event is answered `duplicate`, and
 * retention purges it like any settled row. No handler runs. Only needs-review rows are touched,
 * whatever `filter.state` says. With `dryRun` nothing changes and the matching rows are returned.
 * @throws Error when `note` is blank (the note is the audit trail of a manual decision).
 */
export async function resolveReviewed(db: Db | Tx, filter: RowFilter, note: string, dryRun: boolean): Promise<ResolveResult> {
  if (note.trim() === "") throw new Error("Cannot resolve without a note: say what was done about the event (--note)");
  const match = whereRows(db, { ...filter, state: "needs_review" });
  const rows = dryRun
    ? await db<ResolveResult["rows"]>`
        select provider, endpoint, event_id as "eventId", event_type as "eventType", last_error as "lastError"
          from webhook_inbox_state
         where ${match}
         order by received_at
      `
    : await db<ResolveResult["rows"]>`
        with picked as (
          select provider, endpoint, event_id
            from webhook_inbox_state
           where ${match}
        )
        update webhook_inbox w
           set processed_at = now(),
               outcome = 'resolved',
               resolution_note = ${note.trim()},
               needs_review_at = null
          from picked p
         where (w.provider, w.endpoint, w.event_id) = (p.provider, p.endpoint, p.event_id)
           and w.processed_at is null
           and w.needs_review_at is not null
        returning w.provider, w.endpoint, w.event_id as "eventId", w.event_type as "eventType", w.last_error as "lastError"
      `;
  return { dryRun, rows: [...rows] };
}
