import type postgres from "postgres";
import type { Db } from "../db/db.ts";
import { ensurePartitions, listPartitions } from "../inbox/partitions.ts";
import { providerNamed, providers } from "../providers/registry.ts";

const DAY_MS = 86_400_000;

/** Kept beyond a provider's resend window before an inbox key may go: clock skew, a late run, an investigation. */
export const RETENTION_MARGIN_MS = DAY_MS;

/**
 * Default retention, ms: 31 days, Stripe's resend window (its 30 days of events) plus the margin. By
 * default an inbox key is kept this long, or longer where its provider's window asks for it
 * ({@link keyFloorMs}), and a payload this long.
 */
export const DEFAULT_RETENTION_MS = 31 * DAY_MS;

/** The longest resend window of the registered providers, ms (what a provider the registry does not know gets). */
const LONGEST_WINDOW_MS = Math.max(...Object.values(providers).map((p) => p.resendWindowMs));

/**
 * The shortest time purge keeps the key of an event of `provider` without `force`, ms: the provider's
 * resend window (`WebhookProvider.resendWindowMs`: how long it may send the same event id again) plus
 * {@link RETENTION_MARGIN_MS}. A provider the registry does not know gets the longest window known.
 */
export function keyFloorMs(provider: string): number {
  return (providerNamed(provider)?.resendWindowMs ?? LONGEST_WINDOW_MS) + RETENTION_MARGIN_MS;
}

/** Options of {@link purge}; durations in ms, measured from each row's `received_at` (the product's clock). */
export interface PurgeOptions {
  /**
   * Delete the settled inbox rows (keys) of every provider received longer ago than this. Undefined:
   * each provider's own default, {@link DEFAULT_RETENTION_MS} or its {@link keyFloorMs} if longer.
   */
  olderThanMs?: number;
  /** Drop the payloads received longer ago than this (whole weekly partitions); default {@link DEFAULT_RETENTION_MS}. */
  payloadsOlderThanMs?: number;
  /** Allow `olderThanMs` below a provider's {@link keyFloorMs}. */
  force?: boolean;
  /** Rows per delete statement (each its own short transaction). Default 1000. */
  batchSize?: number;
  dryRun?: boolean;
}

/** What a purge removed (or would remove, on a dry run). */
export interface PurgeResult {
  dryRun: boolean;
  /** Settled inbox rows (keys) deleted. */
  deleted: number;
  /** The key retention each provider that has rows was purged at, ms. */
  keyRetention: { provider: string; olderThanMs: number }[];
  /** Payload partitions dropped whole (or that would be, on a dry run), oldest first. */
  partitionsDropped: string[];
  /** Payloads of unsettled rows (unprocessed, needs-review) in dropped partitions, moved to the default partition. */
  openPayloadsMoved: number;
  /** Payload rows removed: those in dropped partitions and those deleted from the default partition. */
  payloadsDropped: number;
  /** Published outbox messages. */
  outboxDeleted: number;
  /** Stripe change claims (stripe_change_claims). */
  claimsDeleted: number;
  /** Finished event backfill requests. */
  backfillRequestsDeleted: number;
  /** Dry run only: why the real run would be refused without `force` (a key retention below a provider's window). */
  forceRequired?: string;
}

/** A retention that is too short: an event met again after its key is gone would be applied again. */
export class RetentionTooShortError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "RetentionTooShortError";
  }
}

/**
 * Retention (seed §9, §7 on TTLs), on the layout of sql/0027, every age measured from `received_at`:
 * - keys: settled inbox rows are deleted in batches once older than their provider's key retention
 *   (`olderThanMs`, else per provider the longer of {@link DEFAULT_RETENTION_MS} and
 *   {@link keyFloorMs}); a key retention below a provider's window is refused unless `force`, since
 *   that provider's next delivery of a purged event would be applied again;
 * - payloads: whole weekly partitions of `webhook_inbox_payloads` past `payloadsOlderThanMs` are dropped,
 *   the payloads of rows still unsettled moved out first ({@link dropPartition}); past payloads in the
 *   default partition are deleted in batches, those of unsettled rows kept. Payloads may go long before
 *   keys: a key is all deduplication needs;
 * - companions past `olderThanMs` (default {@link DEFAULT_RETENTION_MS}): published outbox messages,
 *   change claims, finished backfill requests.
 * Unprocessed and needs-review rows and their payloads, unpublished messages and unfinished requests
 * are never touched. A dry run changes nothing and never needs `force`: it counts, and says in
 * `forceRequired` that the real run would.
 * @throws RetentionTooShortError naming each provider and its window (not on a dry run).
 */
export async function purge(db: Db, options: PurgeOptions): Promise<PurgeResult> {
  const present = await inboxProviders(db);
  const keyRetention = present.map((provider) => ({
    provider,
    olderThanMs: options.olderThanMs ?? Math.max(DEFAULT_RETENTION_MS, keyFloorMs(provider)),
  }));
  const tooShort = options.force ? [] : keyRetention.filter((k) => k.olderThanMs < keyFloorMs(k.provider));
  const forceRequired = tooShort.length
    ? tooShort
        .map(
          (k) =>
            `a key retention of ${duration(k.olderThanMs)} is shorter than ${k.provider}'s ${duration(keyFloorMs(k.provider))} ` +
            `(it may send an event again for ${duration(keyFloorMs(k.provider) - RETENTION_MARGIN_MS)}, plus a ${duration(RETENTION_MARGIN_MS)} margin)`,
        )
        .join("; ") + "; an event met after its key is gone would be applied again"
    : undefined;
  if (forceRequired && !options.dryRun) throw new RetentionTooShortError(`Cannot purge: ${forceRequired}. Use --force to override.`);
  const dryRun = options.dryRun ?? false;
  const batch = options.batchSize ?? 1000;
  const result: PurgeResult = {
    dryRun,
    deleted: 0,
    keyRetention,
    partitionsDropped: [],
    openPayloadsMoved: 0,
    payloadsDropped: 0,
    outboxDeleted: 0,
    claimsDeleted: 0,
    backfillRequestsDeleted: 0,
  };
  for (const k of keyRetention) {
    const expired = db`provider = ${k.provider} and processed_at is not null and received_at < now() - ${k.olderThanMs} * interval '1 millisecond'`;
    result.deleted += await deleteInBatches(db, "webhook_inbox", expired, batch, dryRun);
  }
  await purgePayloads(db, options.payloadsOlderThanMs ?? DEFAULT_RETENTION_MS, batch, result);
  const companions = options.olderThanMs ?? DEFAULT_RETENTION_MS;
  const older = (column: string) => db`${db(column)} < now() - ${companions} * interval '1 millisecond'`;
  result.outboxDeleted = await deleteInBatches(db, "outbox", older("published_at"), batch, dryRun);
  result.claimsDeleted = await deleteInBatches(db, "stripe_change_claims", older("claimed_at"), batch, dryRun);
  result.backfillRequestsDeleted = await deleteInBatches(db, "event_backfill_requests", older("finished_at"), batch, dryRun);
  return forceRequired ? { ...result, forceRequired } : result;
}

/** The providers that have inbox rows, read from the primary key's leading column one step at a time (a loose index scan). */
async function inboxProviders(db: Db): Promise<string[]> {
  const rows = await db<{ provider: string }[]>`
    with recursive p as (
      (select provider from webhook_inbox order by provider limit 1)
      union all
      select (select w.provider from webhook_inbox w where w.provider > p.provider order by w.provider limit 1)
        from p
       where p.provider is not null
    )
    select provider from p where provider is not null
  `;
  return rows.map((r) => r.provider);
}

/**
 * The payload part of {@link purge} (sql/0027; PostgreSQL manual, "Partition Maintenance"): creates the
 * partitions ahead, drops each weekly partition entirely older than `olderThanMs` ({@link dropPartition}),
 * then deletes in batches the payloads in the default partition past it whose row is settled or gone.
 * A dry run counts and changes nothing. Adds to `result`.
 */
async function purgePayloads(db: Db, olderThanMs: number, batch: number, result: PurgeResult): Promise<void> {
  if (!result.dryRun) await ensurePartitions(db);
  const [{ cutoff } = { cutoff: new Date(0) }] = await db<
    { cutoff: Date }[]
  >`select now() - ${olderThanMs} * interval '1 millisecond' as cutoff`;
  for (const p of await listPartitions(db)) {
    if (p.kind !== "range" || p.to === null || p.to > cutoff) continue;
    const [row] = await db<{ all: number; open: number }[]>`
      select count(*)::int as all,
             count(*) filter (where exists (select 1 from webhook_inbox s
                                             where (s.provider, s.endpoint, s.event_id, s.received_at) = (p.provider, p.endpoint, p.event_id, p.received_at)
                                               and s.processed_at is null))::int as open
        from ${db(p.name)} p
    `;
    if (!result.dryRun) await dropPartition(db, p.name);
    result.payloadsDropped += (row?.all ?? 0) - (row?.open ?? 0);
    result.openPayloadsMoved += row?.open ?? 0;
    result.partitionsDropped.push(p.name);
  }
  const expired = db`
    t.received_at < ${cutoff}
    and not exists (select 1 from webhook_inbox s
                     where (s.provider, s.endpoint, s.event_id, s.received_at) = (t.provider, t.endpoint, t.event_id, t.received_at)
                       and s.processed_at is null)
  `;
  result.payloadsDropped += await deleteInBatches(db, "webhook_inbox_payloads_default", expired, batch, result.dryRun);
}

/**
 * Deletes the rows of `table` (one table: a ctid names a row only inside one; `t` in `where`) matching `where`, `batch` at a
 * time, each batch its own statement so no transaction holds many row locks; a dry run counts them instead.
 * Returns how many.
 */
async function deleteInBatches(db: Db, table: string, where: postgres.Fragment, batch: number, dryRun: boolean): Promise<number> {
  if (dryRun) {
    const [row] = await db<{ n: number }[]>`select count(*)::int as n from ${db(table)} as t where ${where}`;
    return row?.n ?? 0;
  }
  let deleted = 0;
  for (;;) {
    const rows = await db`
      delete from ${db(table)}
       where ctid in (
         select ctid
           from ${db(table)} as t
          where ${where}
          limit ${batch}
       )
    `;
    deleted += rows.count;
    if (rows.count < batch) return deleted;
  }
}

/**
 * Drops one payload partition in one short transaction (lock_timeout 5 s): detaches it (ACCESS EXCLUSIVE
 * on webhook_inbox_payloads for the transaction: receivers wait milliseconds), copies the payloads of
 * its rows still unsettled into the parent (its range is no longer attached, so they land in the
 * default partition under the same key and received_at, where their rows find them), and drops it.
 */
async function dropPartition(db: Db, name: string): Promise<void> {
  await db.begin(async (tx) => {
    await tx`set local lock_timeout = '5s'`;
    await tx`alter table webhook_inbox_payloads detach partition ${tx(name)}`;
    await tx`
      insert into webhook_inbox_payloads
      select p.*
        from ${tx(name)} p
        join webhook_inbox s using (provider, endpoint, event_id, received_at)
       where s.processed_at is null
    `;
    await tx`drop table ${tx(name)}`;
  });
}

/** A duration for messages, in the largest unit that keeps it readable: 4 d, 36.0 h, 90 min, 5 s. */
function duration(ms: number): string {
  if (ms >= DAY_MS && Number.isInteger(ms / DAY_MS)) return `${ms / DAY_MS} d`;
  if (ms >= 3_600_000) return `${(ms / 3_600_000).toFixed(1)} h`;
  if (ms >= 60_000) return `${Math.round(ms / 60_000)} min`;
  return `${Math.round(ms / 1_000)} s`;
}
