// The inbox and outbox backlogs: what the receiver's probes and metrics and the operator's `inbox status`
// both read, so it sits below both.
import type { Db, Tx } from "../db/db.ts";

/** Backlog of one endpoint: what is waiting and what needs an operator. Ages in seconds. */
export interface Backlog {
  provider: string;
  endpoint: string;
  unprocessed: number;
  /** Age of the oldest unprocessed (not parked) row, seconds; 0 when none. */
  oldestUnprocessedAgeSec: number;
  needsReview: number;
}

/**
 * Backlog of the transactional outbox (seed §6, end): rows not yet published. Ages in seconds.
 * `pending` excludes parked rows; `needsReview` counts rows parked for an operator (dead letter).
 */
export interface OutboxBacklog {
  pending: number;
  /** Age of the oldest pending (not parked) row since it was written, seconds; 0 when none. */
  oldestPendingAgeSec: number;
  needsReview: number;
}

/**
 * Backlog per provider and endpoint, read from the partial indexes on unprocessed and parked rows
 * (seed §9's monitoring query, split by endpoint). Used by `inbox status` and the `/metrics` gauges.
 */
export async function readBacklog(db: Db | Tx): Promise<Backlog[]> {
  const rows = await db<Backlog[]>`
    select provider, endpoint,
           count(*) filter (where needs_review_at is null)::int as unprocessed,
           coalesce(extract(epoch from now() - min(received_at) filter (where needs_review_at is null)), 0)::float8 as "oldestUnprocessedAgeSec",
           count(*) filter (where needs_review_at is not null)::int as "needsReview"
      from webhook_inbox
     where processed_at is null
     group by provider, endpoint
     order by provider, endpoint
  `;
  return [...rows];
}

/**
 * The outbox backlog, read from the partial indexes `outbox_due` and `outbox_needs_review` (0005):
 * unpublished rows only, so its cost follows the backlog, not the table. Used by `inbox status` and
 * the `/metrics` gauges.
 */
export async function readOutboxBacklog(db: Db | Tx): Promise<OutboxBacklog> {
  const [row] = await db<OutboxBacklog[]>`
    select count(*) filter (where needs_review_at is null)::int as pending,
           coalesce(extract(epoch from now() - min(created_at) filter (where needs_review_at is null)), 0)::float8 as "oldestPendingAgeSec",
           count(*) filter (where needs_review_at is not null)::int as "needsReview"
      from outbox
     where published_at is null
  `;
  return { pending: row?.pending ?? 0, oldestPendingAgeSec: row?.oldestPendingAgeSec ?? 0, needsReview: row?.needsReview ?? 0 };
}

/** How far event backfill got for one endpoint (sql/0017_event_backfill.sql): its account furthest behind. */
export interface BackfillAge {
  provider: string;
  endpoint: string;
  /** ISO time before which every event Stripe listed is recorded. */
  coveredUntil: string;
  /** Seconds since `coveredUntil`: past 30 days (2592000) events of the gap can no longer be backfilled. */
  ageSec: number;
}

/** An endpoint's backfill requests no run has finished (sql/0015): windows a failover or a Stripe health notification asked to re-read. */
export interface UnfinishedBackfill {
  endpoint: string;
  requests: number;
  /** ISO time: the earliest window start. */
  since: string;
  /** Seconds since the oldest was recorded. */
  oldestAgeSec: number;
  /** The run that finishes them all (with STRIPE_API_KEY; `--all-accounts` when some are connected accounts'). */
  command: string;
}

/** How far event backfill got per endpoint, and what it still owes. */
export interface BackfillAges {
  checkpoints: BackfillAge[];
  requests: UnfinishedBackfill[];
}

/**
 * Every endpoint's backfill checkpoint (at a Connect endpoint its account furthest behind: one row, one
 * metric series) and unfinished backfill requests; a handful of rows, for `inbox status`, /admin and `/metrics`.
 */
export async function readBackfillAges(db: Db | Tx): Promise<BackfillAges> {
  const checkpoints = await db<{ provider: string; endpoint: string; coveredUntil: Date; ageSec: number }[]>`
    select provider, endpoint, min(covered_until) as "coveredUntil", extract(epoch from now() - min(covered_until))::float8 as "ageSec"
      from event_backfill_checkpoints
     where covered_until is not null
     group by provider, endpoint
     order by provider, endpoint
  `;
  const requests = await db<{ endpoint: string; requests: number; accounts: boolean; since: Date; age: number }[]>`
    select endpoint, count(*)::int as requests, bool_or(account <> '') as accounts, min(window_start) as since,
           extract(epoch from now() - min(requested_at))::float8 as age
      from event_backfill_requests
     where finished_at is null
     group by endpoint
     order by endpoint
  `;
  return {
    checkpoints: checkpoints.map((r) => ({ ...r, coveredUntil: r.coveredUntil.toISOString() })),
    requests: requests.map(({ endpoint, requests, accounts, since, age }) => ({
      endpoint,
      requests,
      since: since.toISOString(),
      oldestAgeSec: age,
      command: `bun run reconcile events --endpoint ${endpoint} --since ${since.toISOString()}${accounts ? " --all-accounts" : ""}`,
    })),
  };
}

/** The latest object reconciliation of one kind (sql/0029 reconcile_runs), its accounts summed. */
export interface ReconcileDrift {
  /** `invoices`, `refunds` or `disputes`. */
  kind: string;
  /** Objects that drifted in the latest run of each account. */
  drifted: number;
  /** Of those, objects a --repair applied. */
  repaired: number;
  /** Seconds since the oldest of the accounts' latest runs finished. */
  ageSec: number;
}

/** The latest reconciliation per kind (a row per kind that has run), for `/metrics` and `inbox status`. */
export async function readReconcileDrift(db: Db | Tx): Promise<ReconcileDrift[]> {
  const rows = await db<ReconcileDrift[]>`
    select kind, sum(drifted)::int as drifted, sum(repaired)::int as repaired,
           extract(epoch from now() - min(finished_at))::float8 as "ageSec"
      from reconcile_runs
     group by kind
     order by kind
  `;
  return [...rows];
}
