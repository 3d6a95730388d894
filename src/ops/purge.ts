import type { Db } from "../db/db.ts";

/** Stripe retries a delivery for up to 3 days (Stripe docs, "Retry behavior"). */
export const STRIPE_RETRY_HORIZON_MS = 3 * 86_400_000;
/** Kept beyond the horizon before a row may go, for late retries and investigations. */
export const RETENTION_MARGIN_MS = 86_400_000;

/** Options of {@link purge}; durations in ms. */
export interface PurgeOptions {
  /** Delete processed rows whose `processed_at` is older than this. */
  olderThanMs: number;
  /** Also drop the payload (keeping key and metadata) of processed rows older than this. */
  payloadsOlderThanMs?: number;
  /** Allow a retention shorter than the provider's retry horizon plus the margin. */
  force?: boolean;
  /** Rows per delete statement (each its own short transaction). Default 1000. */
  batchSize?: number;
  dryRun?: boolean;
  /** The provider's retry horizon. Default Stripe's 3 days. */
  horizonMs?: number;
}

/** What a purge removed (or would remove, on a dry run). */
export interface PurgeResult {
  dryRun: boolean;
  deleted: number;
  payloadsDropped: number;
  /** Dry run only: why the real run would be refused without `force` (the retention is too short). */
  forceRequired?: string;
}

/** A retention that is too short: a redelivery after the row is gone would be processed again. */
export class RetentionTooShortError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "RetentionTooShortError";
  }
}

/**
 * Retention (seed §9, §7 on TTLs): deletes *processed* rows older than `olderThanMs` in batches, and
 * optionally drops payloads of processed rows older than `payloadsOlderThanMs`. Unprocessed and
 * needs-review rows are never touched. A row deleted while the provider may still redeliver its event
 * would let that redelivery be processed a second time, so a retention shorter than the horizon plus a
 * one-day margin is refused unless `force`. A dry run changes nothing, so it never needs `force`: it
 * counts, and says in `forceRequired` that the real run would.
 * @throws RetentionTooShortError naming the horizon (not on a dry run).
 */
export async function purge(db: Db, options: PurgeOptions): Promise<PurgeResult> {
  const horizonMs = options.horizonMs ?? STRIPE_RETRY_HORIZON_MS;
  const minimum = horizonMs + RETENTION_MARGIN_MS;
  const tooShort =
    options.olderThanMs < minimum && !options.force
      ? `a retention of ${days(options.olderThanMs)} is shorter than the provider's retry horizon of ${days(horizonMs)} plus a ${days(RETENTION_MARGIN_MS)} margin (${days(minimum)}); a redelivery after that would be processed again`
      : undefined;
  if (tooShort && !options.dryRun) throw new RetentionTooShortError(`Cannot purge: ${tooShort}. Use --force to override.`);
  const batch = options.batchSize ?? 1000;
  const result: PurgeResult = { dryRun: options.dryRun ?? false, deleted: 0, payloadsDropped: 0 };
  const rowCutoff = db`now() - ${options.olderThanMs} * interval '1 millisecond'`;
  const payloadCutoff = db`now() - ${options.payloadsOlderThanMs ?? 0} * interval '1 millisecond'`;
  if (result.dryRun) {
    const [row] = await db<{ deleted: number; dropped: number }[]>`
      select count(*) filter (where processed_at < ${rowCutoff})::int as deleted,
             count(*) filter (where processed_at >= ${rowCutoff}
                                and processed_at < ${payloadCutoff}
                                and payload is not null)::int as dropped
        from webhook_inbox
       where processed_at is not null
    `;
    const counted = {
      ...result,
      deleted: row?.deleted ?? 0,
      payloadsDropped: options.payloadsOlderThanMs === undefined ? 0 : (row?.dropped ?? 0),
    };
    return tooShort ? { ...counted, forceRequired: tooShort } : counted;
  }
  for (;;) {
    const rows = await db`
      delete from webhook_inbox
       where ctid in (
         select ctid
           from webhook_inbox
          where processed_at is not null
            and processed_at < ${rowCutoff}
          limit ${batch}
       )
    `;
    result.deleted += rows.count;
    if (rows.count < batch) break;
  }
  if (options.payloadsOlderThanMs !== undefined) {
    for (;;) {
      const rows = await db`
        update webhook_inbox
           set payload = null,
               raw_body = null, -- the exact bytes kept beside a sanitized copy (0010) go with it
               payload_dropped_at = now()
         where ctid in (
           select ctid
             from webhook_inbox
            where processed_at is not null
              and payload is not null
              and processed_at < ${payloadCutoff}
            limit ${batch}
         )
      `;
      result.payloadsDropped += rows.count;
      if (rows.count < batch) break;
    }
  }
  return result;
}

/** A duration for messages, in the largest unit that keeps it readable: 4 d, 36.0 h, 90 min, 5 s. */
function days(ms: number): string {
  if (ms >= 86_400_000 && Number.isInteger(ms / 86_400_000)) return `${ms / 86_400_000} d`;
  if (ms >= 3_600_000) return `${(ms / 3_600_000).toFixed(1)} h`;
  if (ms >= 60_000) return `${Math.round(ms / 60_000)} min`;
  return `${Math.round(ms / 1_000)} s`;
}
