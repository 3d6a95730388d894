import type postgres from "postgres";
import type { Db } from "../db/db.ts";
import { ensurePartitions, listPartitions, type InboxPartition } from "../inbox/partitions.ts";
import { STRIPE_EVENTS_KEPT_MS, STRIPE_RETRY_HORIZON_MS } from "../providers/stripe.ts";

/** Kept beyond the longest horizon before a row may go: clock skew, a late run, an investigation. */
export const RETENTION_MARGIN_MS = 86_400_000;

/**
 * The shortest retention purge accepts without `force`, ms: the longest time after an event's creation
 * in which the product may meet it again (Stripe redelivers for 3 days; event backfill re-reads the
 * 30 days of events Stripe keeps), plus {@link RETENTION_MARGIN_MS}: 31 days.
 */
export const MIN_RETENTION_MS = Math.max(STRIPE_RETRY_HORIZON_MS, STRIPE_EVENTS_KEPT_MS) + RETENTION_MARGIN_MS;

/** Options of {@link purge}; durations in ms. */
export interface PurgeOptions {
  /** Delete settled rows whose event was created longer ago than this (and the companions below). */
  olderThanMs: number;
  /** Also drop the payload (keeping key and metadata) of settled rows processed longer ago than this. */
  payloadsOlderThanMs?: number;
  /** Allow a retention shorter than {@link MIN_RETENTION_MS}. */
  force?: boolean;
  /** Rows per delete statement (each its own short transaction). Default 1000. */
  batchSize?: number;
  /**
   * Only drop whole partitions: no row-by-row delete inside the week that straddles the horizon, so
   * settled rows stay up to 7 days longer than `olderThanMs` (the default and undated partitions are
   * still deleted in batches). Without it, a purge run every day deletes each day's rows one by one
   * before their week can be dropped (docs/operations.md, "Retention").
   */
  wholePartitions?: boolean;
  dryRun?: boolean;
}

/** What a purge removed (or would remove, on a dry run). */
export interface PurgeResult {
  dryRun: boolean;
  /** Settled inbox rows: those in dropped partitions plus those deleted in batches. */
  deleted: number;
  /** Partitions dropped whole (or that would be, on a dry run), oldest first. */
  partitionsDropped: string[];
  /** Unsettled rows (unprocessed, needs-review) of dropped partitions, moved to the default partition. */
  openRowsMoved: number;
  payloadsDropped: number;
  /** Published outbox messages. */
  outboxDeleted: number;
  /** Stripe change claims (stripe_change_claims). */
  claimsDeleted: number;
  /** Finished event backfill requests. */
  backfillRequestsDeleted: number;
  /** Dry run only: why the real run would be refused without `force` (the retention is too short). */
  forceRequired?: string;
}

/** A retention that is too short: an event met again after its row is gone would be applied again. */
export class RetentionTooShortError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "RetentionTooShortError";
  }
}

/**
 * The inbox's companions purge deletes in batches, each by its own clock: published outbox messages by
 * `published_at`, change claims by `claimed_at`, finished backfill requests by `finished_at`. (Inbox rows
 * go by partition: {@link purgeInbox}.)
 */
function targets(db: Db, cutoff: Date) {
  return [
    { result: "outboxDeleted", table: "outbox", where: db`published_at < ${cutoff}` },
    { result: "claimsDeleted", table: "stripe_change_claims", where: db`claimed_at < ${cutoff}` },
    { result: "backfillRequestsDeleted", table: "event_backfill_requests", where: db`finished_at < ${cutoff}` },
  ] as const;
}

/**
 * Retention (seed §9, §7 on TTLs): removes settled inbox rows whose event was created before
 * `olderThanMs` ago ({@link purgeInbox}: whole weekly partitions dropped, batches deleted only in the week
 * that straddles the horizon and in the default and undated partitions), and with them the inbox's companions past the same age:
 * published outbox messages, change claims and finished backfill requests; optionally drops payloads
 * of settled rows processed before `payloadsOlderThanMs` ago (the dedup key stays). Unprocessed and
 * needs-review rows, unpublished messages and unfinished requests are never touched. A row deleted
 * while the product may still meet its event again would let that event be applied a second time, so
 * a retention shorter than {@link MIN_RETENTION_MS} is refused unless `force`. A dry run changes
 * nothing, so it never needs `force`: it counts, and says in `forceRequired` that the real run would.
 * @throws RetentionTooShortError naming the horizon (not on a dry run).
 */
export async function purge(db: Db, options: PurgeOptions): Promise<PurgeResult> {
  const tooShort =
    options.olderThanMs < MIN_RETENTION_MS && !options.force
      ? `a retention of ${days(options.olderThanMs)} is shorter than the ${days(MIN_RETENTION_MS)} in which an event may be met again (Stripe redelivers for ${days(STRIPE_RETRY_HORIZON_MS)}, event backfill re-reads ${days(STRIPE_EVENTS_KEPT_MS)}, plus a ${days(RETENTION_MARGIN_MS)} margin); an event met after its row is gone would be applied again`
      : undefined;
  if (tooShort && !options.dryRun) throw new RetentionTooShortError(`Cannot purge: ${tooShort}. Use --force to override.`);
  const batch = options.batchSize ?? 1000;
  const [{ cutoff, payloadCutoff } = { cutoff: new Date(0), payloadCutoff: new Date(0) }] = await db<
    { cutoff: Date; payloadCutoff: Date }[]
  >`
    select now() - ${options.olderThanMs} * interval '1 millisecond' as cutoff,
           now() - ${options.payloadsOlderThanMs ?? 0} * interval '1 millisecond' as "payloadCutoff"
  `;
  const result: PurgeResult = {
    dryRun: options.dryRun ?? false,
    deleted: 0,
    payloadsDropped: 0,
    outboxDeleted: 0,
    claimsDeleted: 0,
    backfillRequestsDeleted: 0,
    partitionsDropped: [],
    openRowsMoved: 0,
  };
  await purgeInbox(db, cutoff, batch, options.wholePartitions ?? false, result);
  for (const target of targets(db, cutoff))
    result[target.result] += await deleteInBatches(db, target.table, target.where, batch, result.dryRun);
  if (options.payloadsOlderThanMs !== undefined)
    result.payloadsDropped = await dropPayloads(db, payloadCutoff, cutoff, batch, result.dryRun);
  return tooShort ? { ...result, forceRequired: tooShort } : result;
}

/**
 * The inbox part of {@link purge} (sql/0026; PostgreSQL manual, "Partition Maintenance"): first creates
 * the partitions ahead, then for each weekly partition entirely older than `cutoff`, counts its settled
 * rows, and in one short transaction (lock_timeout 5 s) detaches it, moves its unsettled rows
 * (unprocessed or needs-review, which retention never deletes) into the default partition and drops it.
 * Detaching takes ACCESS EXCLUSIVE on webhook_inbox for that transaction: receivers wait milliseconds.
 * Then deletes in batches (by ctid, each its own statement) settled rows past the horizon inside the week
 * that straddles it (unless `wholePartitions`), the default partition and the undated one. An undated row
 * (event_created_at '-infinity') goes by `received_at`; a row dated in the future stays until its date.
 * A dry run counts and changes nothing. Adds to `result`.
 */
async function purgeInbox(db: Db, cutoff: Date, batch: number, wholePartitions: boolean, result: PurgeResult): Promise<void> {
  if (!result.dryRun) await ensurePartitions(db);
  const partitions = await listPartitions(db);
  for (const p of partitions.filter((p) => p.kind === "range" && p.to !== null && p.to <= cutoff)) {
    const [row] = await db<{ settled: number; open: number }[]>`
      select count(*) filter (where processed_at is not null)::int as settled,
             count(*) filter (where processed_at is null)::int as open
        from ${db(p.name)}
    `;
    if (!result.dryRun) await dropPartition(db, p.name);
    result.deleted += row?.settled ?? 0;
    result.openRowsMoved += row?.open ?? 0;
    result.partitionsDropped.push(p.name);
  }
  const straddling = (p: InboxPartition) =>
    p.kind !== "range" || (!wholePartitions && p.from !== null && p.to !== null && p.from < cutoff && cutoff < p.to);
  for (const p of partitions.filter(straddling)) {
    const expired = db`
      processed_at is not null
      and event_created_at < ${cutoff}
      and (event_created_at > '-infinity' or received_at < ${cutoff})
    `;
    result.deleted += await deleteInBatches(db, p.name, expired, batch, result.dryRun);
  }
}

/**
 * Deletes the rows of `table` (one table: a ctid names a row only inside one) matching `where`, `batch` at a
 * time, each batch its own statement so no transaction holds many row locks; a dry run counts them instead.
 * Returns how many.
 */
async function deleteInBatches(db: Db, table: string, where: postgres.Fragment, batch: number, dryRun: boolean): Promise<number> {
  if (dryRun) {
    const [row] = await db<{ n: number }[]>`select count(*)::int as n from ${db(table)} where ${where}`;
    return row?.n ?? 0;
  }
  let deleted = 0;
  for (;;) {
    const rows = await db`
      delete from ${db(table)}
       where ctid in (
         select ctid
           from ${db(table)}
          where ${where}
          limit ${batch}
       )
    `;
    deleted += rows.count;
    if (rows.count < batch) return deleted;
  }
}

/** Detaches, empties of unsettled rows (into the default partition) and drops one inbox partition. */
async function dropPartition(db: Db, name: string): Promise<void> {
  await db.begin(async (tx) => {
    await tx`set local lock_timeout = '5s'`;
    await tx`alter table webhook_inbox detach partition ${tx(name)}`;
    // Its range is no longer attached, so these rows route to webhook_inbox_default; keys unchanged.
    await tx`
      insert into webhook_inbox
      select *
        from ${tx(name)}
       where processed_at is null
    `;
    await tx`drop table ${tx(name)}`;
  });
}

/**
 * Drops the payloads (and the raw bodies kept beside sanitized copies, 0010) of settled rows processed
 * before `cutoff`; a dry run counts those the row purge (`rowCutoff`) would leave.
 */
async function dropPayloads(db: Db, cutoff: Date, rowCutoff: Date, batch: number, dryRun: boolean): Promise<number> {
  if (dryRun) {
    const [row] = await db<{ n: number }[]>`
      select count(*)::int as n
        from webhook_inbox
       where processed_at < ${cutoff}
         and payload is not null
         and event_created_at >= ${rowCutoff}
    `;
    return row?.n ?? 0;
  }
  let dropped = 0;
  // Partition by partition: a ctid names a row only inside one table.
  for (const p of await listPartitions(db)) {
    for (;;) {
      const rows = await db`
        update ${db(p.name)}
           set payload = null,
               raw_body = null,
               payload_dropped_at = now()
         where ctid in (
           select ctid
             from ${db(p.name)}
            where processed_at < ${cutoff}
              and payload is not null
            limit ${batch}
         )
      `;
      dropped += rows.count;
      if (rows.count < batch) break;
    }
  }
  return dropped;
}

/** A duration for messages, in the largest unit that keeps it readable: 4 d, 36.0 h, 90 min, 5 s. */
function days(ms: number): string {
  if (ms >= 86_400_000 && Number.isInteger(ms / 86_400_000)) return `${ms / 86_400_000} d`;
  if (ms >= 3_600_000) return `${(ms / 3_600_000).toFixed(1)} h`;
  if (ms >= 60_000) return `${Math.round(ms / 60_000)} min`;
  return `${Math.round(ms / 1_000)} s`;
}
