import type { Db } from "../db/db.ts";
import { readHeartbeats, type LoopProcess } from "../loop/heartbeat.ts";
import { readBackfillAges, readBacklog, readOutboxBacklog, type BackfillAges, type Backlog, type OutboxBacklog } from "../inbox/backlog.ts";
import { readPauses, type Pause } from "../inbox/pauses.ts";

/** Arrivals of one event type at one endpoint within the status window. */
export interface Arrivals {
  provider: string;
  endpoint: string;
  eventType: string;
  received: number;
  processed: number;
  ignored: number;
  /** Events recorded `ignored_mode`: their livemode is not the endpoint's mode (never applied; docs/stripe-connect.md). */
  ignoredMode: number;
  /** Needs-review rows an operator closed by hand (`inbox resolve`). */
  resolved: number;
  unprocessed: number;
  needsReview: number;
}

/** What `inbox status` reports. */
export interface InboxStatus {
  backlog: Backlog[];
  outbox: OutboxBacklog;
  /** Window of `arrivals`, seconds (default the last hour). */
  windowSec: number;
  arrivals: Arrivals[];
  /** Event backfill checkpoints: how far `reconcile events` (or the catch-up) got per endpoint, and its age. */
  backfill: BackfillAges["checkpoints"];
  /** Backfill requests no run has finished, per endpoint: a failover's or a Stripe health notification's (docs/failover.md). */
  backfillRequests: BackfillAges["requests"];
  /** Workers and dispatchers of the last day, from their heartbeats: alive, dead or stopped (loop/heartbeat.ts). */
  processes: LoopProcess[];
  /** Pauses in force (`inbox pause`), oldest first, with the unprocessed rows each holds back. */
  pauses: Pause[];
}

/**
 * The inbox and outbox backlogs, event backfill's checkpoints and unfinished requests, the workers' and
 * dispatchers' heartbeats, the pauses in force, plus arrivals per endpoint and event type over the last
 * `windowSec` seconds (default 3600).
 */
export async function inboxStatus(db: Db, windowSec = 3600): Promise<InboxStatus> {
  const arrivals = await db<Arrivals[]>`
    select provider, endpoint, event_type as "eventType",
           count(*)::int as received,
           count(*) filter (where state = 'processed')::int as processed,
           count(*) filter (where state = 'ignored')::int as ignored,
           count(*) filter (where state = 'ignored_mode')::int as "ignoredMode",
           count(*) filter (where state = 'resolved')::int as resolved,
           count(*) filter (where state = 'unprocessed')::int as unprocessed,
           count(*) filter (where state = 'needs_review')::int as "needsReview"
      from webhook_inbox_state
     where received_at > now() - ${windowSec} * interval '1 second'
     group by provider, endpoint, event_type
     order by provider, endpoint, received desc, event_type
  `;
  const backfill = await readBackfillAges(db);
  return {
    backlog: await readBacklog(db),
    outbox: await readOutboxBacklog(db),
    backfill: backfill.checkpoints,
    backfillRequests: backfill.requests,
    windowSec,
    arrivals: [...arrivals],
    processes: await readHeartbeats(db),
    pauses: await readPauses(db),
  };
}
