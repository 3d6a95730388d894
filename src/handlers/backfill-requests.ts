import type { Db, Tx } from "../db/db.ts";

/** A window of event creation times to backfill for an endpoint, as a health notification reported it. */
export interface BackfillRequest {
  id: number;
  /** The endpoint the health notification came to. */
  endpoint: string;
  start: Date;
  end: Date;
}

/**
 * Records a request to backfill events created in `[start, end]`, once per notification (`requestedBy`,
 * its event id, is unique). Must run inside the transaction that settles the notification, so the request
 * exists exactly when the notification is settled. Returns the new request's id, or undefined when this
 * notification already recorded one.
 */
export async function recordBackfillRequest(
  tx: Tx,
  request: { endpoint: string; requestedBy: string; start: Date; end: Date },
): Promise<number | undefined> {
  const [row] = await tx<{ id: string }[]>`
    insert into event_backfill_requests (endpoint, requested_by, window_start, window_end)
    values (${request.endpoint}, ${request.requestedBy}, ${request.start}, ${request.end})
    on conflict (requested_by) do nothing
    returning id
  `;
  return row ? Number(row.id) : undefined;
}

/**
 * Takes the oldest backfill request no run has finished: never started, or started more than `retakeAfterMs`
 * ago without finishing (its run died). Marks it started, one statement (`FOR UPDATE SKIP LOCKED`, so two
 * runners never take one request at once). Undefined when none is waiting. `endpoints`: only requests for these endpoint names (a runner never takes,
 * and so delays, a request it cannot serve); undefined: any. The event backfill calls this,
 * backfills the window, then {@link finishBackfillRequest}.
 */
export async function takeBackfillRequest(
  db: Db,
  retakeAfterMs = 3_600_000,
  endpoints?: readonly string[],
): Promise<BackfillRequest | undefined> {
  const any = endpoints === undefined;
  const [row] = await db<{ id: string; endpoint: string; window_start: Date; window_end: Date }[]>`
    update event_backfill_requests r
       set started_at = now()
      from (select id
              from event_backfill_requests
             where finished_at is null
               and (${any}::boolean or endpoint = any(${endpoints ?? []}::text[]))
               and (started_at is null or started_at < now() - make_interval(secs => ${retakeAfterMs}::float8 / 1000))
             order by id
             limit 1
               for update skip locked) picked
     where r.id = picked.id
    returning r.id, r.endpoint, r.window_start, r.window_end
  `;
  return row ? { id: Number(row.id), endpoint: row.endpoint, start: row.window_start, end: row.window_end } : undefined;
}

/** Marks a taken request done (its whole window backfilled). Returns false when it was already finished. */
export async function finishBackfillRequest(db: Db, id: number): Promise<boolean> {
  const rows = await db`
    update event_backfill_requests
       set finished_at = now()
     where id = ${id}
       and finished_at is null
  `;
  return rows.count === 1;
}
