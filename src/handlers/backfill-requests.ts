import type { Db, Tx } from "../db/db.ts";

/** A window of event creation times to backfill for an endpoint, as a health notification reported it. */
export interface BackfillRequest {
  id: number;
  /** The endpoint the health notification came to. */
  endpoint: string;
  /** Whose events to read: a connected account's id (`acct_…`, read with `Stripe-Account`) or `""` for the platform. */
  account: string;
  start: Date;
  end: Date;
}

/**
 * Records a request to backfill `account`'s events (default `""`, the platform) created in `[start, end]`
 * at `endpoint`, once per (endpoint, account, requester) (`requestedBy`: the notification's event id), so
 * a notification that reached two endpoints asks each. Must run inside the transaction that settles the notification, so the request
 * exists exactly when the notification is settled. Returns the new request's id, or undefined when this
 * notification already recorded one.
 */
export async function recordBackfillRequest(
  tx: Tx,
  request: { endpoint: string; account?: string; requestedBy: string; start: Date; end: Date },
): Promise<number | undefined> {
  const [row] = await tx<{ id: string }[]>`
    insert into event_backfill_requests (endpoint, account, requested_by, window_start, window_end)
    values (${request.endpoint}, ${request.account ?? ""}, ${request.requestedBy}, ${request.start}, ${request.end})
    on conflict (endpoint, account, requested_by) do nothing
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
  const [row] = await db<{ id: string; endpoint: string; account: string; window_start: Date; window_end: Date }[]>`
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
    returning r.id, r.endpoint, r.account, r.window_start, r.window_end
  `;
  return row
    ? { id: Number(row.id), endpoint: row.endpoint, account: row.account, start: row.window_start, end: row.window_end }
    : undefined;
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

/**
 * Marks finished each unfinished request of `run`'s endpoint and account whose window a `done` run of
 * every event type (`reconcile events`, not a dry run) read: from `from` (or its reported `unrecoverable`
 * start) to `to`, when its listing began (whole seconds, so a window may end within that second).
 */
export async function finishCoveredRequests(
  db: Db,
  run: { endpoint: string; account: string; status: string; from: string | null; to: string; unrecoverable: { from: string } | null },
): Promise<void> {
  const from = run.unrecoverable?.from ?? run.from;
  if (run.status !== "done" || from === null) return;
  await db`
    update event_backfill_requests
       set finished_at = now()
     where finished_at is null
       and endpoint = ${run.endpoint}
       and account = ${run.account}
       and window_start >= ${new Date(from)}
       and window_end < ${new Date(run.to)}::timestamptz + interval '1 second'
  `;
}
