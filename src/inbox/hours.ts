// The inbox per endpoint and hour of arrival (sql/0029_health.sql, webhook_inbox_hours): closed hours
// computed once from the state rows and kept, the current hour and every unsettled row read live. What the
// operator's 30-day charts and the "provider went silent" gauges read, so neither scans 30 days of rows
// per page load or scrape (docs/scale.md, "Health over 30 days"). Nothing is written on the delivery path.
import type { Db, Tx } from "../db/db.ts";

const HOUR_MS = 3_600_000;

/** Hours kept in webhook_inbox_hours; older rows are deleted by the next fill. */
export const KEPT_HOURS = 32 * 24;

/**
 * How long after an hour ends it may be computed and kept, ms. A row's received_at is its transaction's
 * start, so a delivery that began at 10:59:59 may commit after 11:00; every transaction that records a
 * row is bounded far below this (a delivery by STATEMENT_TIMEOUT_MS, 10 s by default; a repair by 30 s),
 * so a kept hour never misses one. Until then the hour is read live.
 */
export const SETTLE_MS = 10 * 60_000;

/** One endpoint's arrivals in one hour, as the charts need them. Times in ms since the epoch. */
export interface InboxHour {
  provider: string;
  endpoint: string;
  /** Start of the hour (UTC). */
  hour: number;
  received: number;
  /** Rows of the hour settled (when computed) after more than one attempt, or resolved by hand. */
  failed: number;
  /** Rows of the hour an operator closed with `inbox resolve`. */
  resolved: number;
  /** 95th percentile and maximum of processed_at − received_at of the hour's processed rows, ms; null: none. */
  latencyP95Ms: number | null;
  latencyMaxMs: number | null;
  firstReceived: number;
  lastReceived: number;
  /** Longest time between two arrivals within the hour, ms; null with one row. */
  maxGapMs: number | null;
  /** Rows of the hour that settled in a later hour, by the start of that hour (ms). */
  settledLater: [hour: number, rows: number][];
}

/** The unsettled rows of one endpoint and hour of arrival, now (any age). */
export interface OpenHour {
  provider: string;
  endpoint: string;
  hour: number;
  /** Waiting for a worker. */
  waiting: number;
  /** Parked for an operator (needs-review). */
  parked: number;
  /** Parked, or with a failed attempt behind them. */
  failed: number;
}

/** What {@link readInboxHours} returns. */
export interface InboxHours {
  /** Computed closed hours and the current hour: settled rows' figures and every row's arrival. */
  hours: InboxHour[];
  /** Every unsettled row, by endpoint and hour of arrival, read live. */
  open: OpenHour[];
  /** Start of the current hour (ms). */
  currentHour: number;
  /** Start of the hours read live (ms): the current hour, and the one before during its first {@link SETTLE_MS}. */
  liveFrom: number;
  /** The database's now() at the read (ms). */
  now: number;
  /** Closed hours of the window not computed yet (their rows are missing from `hours`), newest first. */
  missing: number[];
}

interface HourRow {
  provider: string;
  endpoint: string;
  hour: Date;
  received: number;
  open: number;
  failed: number;
  resolved: number;
  latencyP95Ms: number | null;
  latencyMaxMs: number | null;
  firstReceived: Date;
  lastReceived: Date;
  maxGapMs: number | null;
  settledLater: Record<string, number>;
}

/**
 * The hour aggregate of the state rows received in [from, to), per endpoint and hour (UTC), as
 * postgres.js fragments can't carry a CTE into an insert: the query text is shared by the fill and the
 * live read. `settled_later` keys are the later hours' starts in seconds since the epoch.
 */
function hourAggregate(db: Db | Tx, from: Date, to: Date) {
  return db`
    with r as (
      select provider, endpoint, received_at, processed_at, outcome, attempts,
             date_trunc('hour', received_at, 'UTC') as hour,
             received_at - lag(received_at) over (partition by provider, endpoint, date_trunc('hour', received_at, 'UTC') order by received_at) as gap
        from webhook_inbox
       where received_at >= ${from}
         and received_at < ${to}
    ), later as (
      select provider, endpoint, hour, jsonb_object_agg(extract(epoch from settled)::bigint::text, n) as settled_later
        from (select provider, endpoint, hour, date_trunc('hour', processed_at, 'UTC') as settled, count(*)::int as n
                from r
               where processed_at >= hour + interval '1 hour'
               group by 1, 2, 3, 4) s
       group by 1, 2, 3
    )
    select r.provider, r.endpoint, r.hour,
           count(*)::int as received,
           count(*) filter (where processed_at is null)::int as open,
           count(*) filter (where processed_at is not null and (attempts > 1 or outcome = 'resolved'))::int as failed,
           count(*) filter (where outcome = 'resolved')::int as resolved,
           percentile_disc(0.95) within group (order by extract(epoch from processed_at - received_at) * 1000)
             filter (where outcome = 'processed')::float8 as "latencyP95Ms",
           (max(extract(epoch from processed_at - received_at) * 1000) filter (where outcome = 'processed'))::float8 as "latencyMaxMs",
           min(received_at) as "firstReceived",
           max(received_at) as "lastReceived",
           (max(extract(epoch from gap) * 1000))::float8 as "maxGapMs",
           coalesce(min(l.settled_later::text), '{}')::jsonb as "settledLater"
      from r
      left join later l using (provider, endpoint, hour)
     group by r.provider, r.endpoint, r.hour
  `;
}

/**
 * Computes and keeps closed hours of the last `days` days (default 30), each once it ended
 * {@link SETTLE_MS} ago: first the hours whose rows
 * settled since they were computed (fewer unsettled now than then: rows are never received into a past
 * hour, so nothing else changes a closed hour but retention), then the hours never computed, newest
 * first, at most `maxHours` in all; each contiguous run in one transaction (its old rows deleted, the new
 * ones and the filled marks inserted). Deletes rows older than {@link KEPT_HOURS}. Concurrent fills of
 * one hour write the same figures. Returns how many hours it computed. `statementTimeoutMs` bounds each
 * statement on the server (default 10 000).
 */
export async function fillInboxHours(db: Db, options: { maxHours: number; days?: number; statementTimeoutMs?: number }): Promise<number> {
  const days = options.days ?? 30;
  const timeout = String(options.statementTimeoutMs ?? 10_000);
  const { current, chosen } = await db.begin(async (tx) => {
    await tx`select set_config('statement_timeout', ${timeout}, true)`;
    const [bounds] = await tx<
      { current: Date }[]
    >`select date_trunc('hour', now() - ${SETTLE_MS} * interval '1 millisecond', 'UTC') as current`;
    const current = bounds!.current.getTime(); // the first hour not closed long enough to keep
    const stale = await tx<{ hour: Date }[]>`
      select distinct h.hour
        from webhook_inbox_hours h
       where h.open > 0
         and h.hour >= ${new Date(current - days * 24 * HOUR_MS)}
         and h.open > (select count(*)
                         from webhook_inbox w
                        where w.processed_at is null
                          and w.received_at >= h.hour
                          and w.received_at < h.hour + interval '1 hour'
                          and (w.provider, w.endpoint) = (h.provider, h.endpoint))
       order by h.hour desc
    `;
    const missing = await missingHours(tx, current, days);
    const chosen = [...new Set([...stale.map((s) => s.hour.getTime()), ...missing])].slice(0, options.maxHours).sort((a, b) => a - b);
    return { current, chosen };
  });
  for (const run of contiguousRuns(chosen)) {
    const from = new Date(run[0]!);
    const to = new Date(run.at(-1)! + HOUR_MS);
    await db.begin(async (tx) => {
      await tx`select set_config('statement_timeout', ${timeout}, true)`;
      await tx`delete from webhook_inbox_hours where hour >= ${from} and hour < ${to}`;
      const rows = await hourAggregate(tx, from, to);
      if (rows.length > 0)
        await tx`
          insert into webhook_inbox_hours ${tx(
            (rows as unknown as HourRow[]).map((r) => ({
              provider: r.provider,
              endpoint: r.endpoint,
              hour: r.hour,
              received: r.received,
              open: r.open,
              failed: r.failed,
              resolved: r.resolved,
              latency_p95_ms: r.latencyP95Ms,
              latency_max_ms: r.latencyMaxMs,
              first_received_at: r.firstReceived,
              last_received_at: r.lastReceived,
              max_gap_ms: r.maxGapMs,
              settled_later: r.settledLater,
            })),
          )}
        `;
      await tx`
        insert into webhook_inbox_hours_filled (hour)
        select generate_series(${from}::timestamptz, ${new Date(to.getTime() - HOUR_MS)}::timestamptz, interval '1 hour')
        on conflict (hour) do update set computed_at = now()
      `;
    });
  }
  await db`delete from webhook_inbox_hours where hour < ${new Date(current - KEPT_HOURS * HOUR_MS)}`;
  await db`delete from webhook_inbox_hours_filled where hour < ${new Date(current - KEPT_HOURS * HOUR_MS)}`;
  return chosen.length;
}

/** Hours of the last `days` days before `current` (ms, an hour's start) with no filled mark, newest first (ms). */
async function missingHours(db: Db | Tx, current: number, days: number): Promise<number[]> {
  const rows = await db<{ hour: Date }[]>`
    select g.hour
      from generate_series(${new Date(current - days * 24 * HOUR_MS)}::timestamptz, ${new Date(current - HOUR_MS)}::timestamptz, interval '1 hour') as g(hour)
     where not exists (select 1 from webhook_inbox_hours_filled f where f.hour = g.hour)
     order by g.hour desc
  `;
  return rows.map((r) => r.hour.getTime());
}

/** Sorted hours (ms) cut into runs of consecutive hours. */
function contiguousRuns(hours: readonly number[]): number[][] {
  const runs: number[][] = [];
  for (const h of hours) {
    const run = runs.at(-1);
    if (run && run.at(-1)! + HOUR_MS === h) run.push(h);
    else runs.push([h]);
  }
  return runs;
}

/**
 * The last `days` days (default 30) per endpoint and hour: computed closed hours from
 * webhook_inbox_hours and the hours since `liveFrom` aggregated live (settled rows' figures, arrivals), and every
 * unsettled row of any age live from the open rows' index (its state now: waiting, parked, failed once),
 * so backlog and needs-review are never stale. Hours not computed yet are listed in `missing`. Reads a
 * handful of rows per endpoint and hour, the current hour's rows and the unsettled ones: never the
 * window's rows.
 */
export async function readInboxHours(db: Db | Tx, days = 30): Promise<InboxHours> {
  const [bounds] = await db<{ current: Date; liveFrom: Date; now: Date }[]>`
    select date_trunc('hour', now(), 'UTC') as current,
           date_trunc('hour', now() - ${SETTLE_MS} * interval '1 millisecond', 'UTC') as "liveFrom",
           now()
  `;
  const current = bounds!.current.getTime();
  const liveFrom = bounds!.liveFrom.getTime();
  const from = new Date(current - days * 24 * HOUR_MS);
  const kept = await db<HourRow[]>`
    select provider, endpoint, hour, received, open, failed, resolved, latency_p95_ms as "latencyP95Ms",
           latency_max_ms as "latencyMaxMs", first_received_at as "firstReceived", last_received_at as "lastReceived",
           max_gap_ms as "maxGapMs", settled_later as "settledLater"
      from webhook_inbox_hours
     where hour >= ${from}
       and hour < ${bounds!.liveFrom}
  `;
  const live = (await hourAggregate(db, bounds!.liveFrom, new Date(bounds!.now.getTime() + 1))) as unknown as HourRow[];
  const open = await db<{ provider: string; endpoint: string; hour: Date; waiting: number; parked: number; failed: number }[]>`
    select provider, endpoint, date_trunc('hour', received_at, 'UTC') as hour,
           count(*) filter (where needs_review_at is null)::int as waiting,
           count(*) filter (where needs_review_at is not null)::int as parked,
           count(*) filter (where needs_review_at is not null or attempts > 1 or last_error is not null)::int as failed
      from webhook_inbox
     where processed_at is null
     group by 1, 2, 3
  `;
  const hours = [...kept, ...live].map((r): InboxHour => ({
    provider: r.provider,
    endpoint: r.endpoint,
    hour: r.hour.getTime(),
    received: r.received,
    failed: r.failed,
    resolved: r.resolved,
    latencyP95Ms: r.latencyP95Ms,
    latencyMaxMs: r.latencyMaxMs,
    firstReceived: r.firstReceived.getTime(),
    lastReceived: r.lastReceived.getTime(),
    maxGapMs: r.maxGapMs,
    settledLater: Object.entries(r.settledLater).map(([sec, n]): [number, number] => [Number(sec) * 1000, n]),
  }));
  return {
    hours,
    open: open.map((o) => ({ ...o, hour: o.hour.getTime() })),
    currentHour: current,
    liveFrom,
    now: bounds!.now.getTime(),
    missing: await missingHours(db, liveFrom, days),
  };
}

/** How an endpoint's arrivals look from {@link readInboxHours}: the newest and the longest silence. Times in ms. */
export interface ArrivalGap {
  provider: string;
  endpoint: string;
  /** The newest arrival in the window read. */
  lastReceived: number;
  /** Time since it, ms, by the database's clock. */
  silenceMs: number;
  /**
   * The longest time between two consecutive arrivals whose hours lie within the last `gapDays` days
   * and were all computed (a silence across an hour not computed yet is not counted); null: fewer than
   * two arrivals there.
   */
  longestGapMs: number | null;
}

/**
 * Per endpoint that received anything in `h`'s window: its newest arrival and its longest silence
 * between two arrivals over the last `gapDays` days (default 7), from the hours' first and last arrivals
 * and their longest gap within: what the "provider went silent" alert compares the current silence with.
 */
export function arrivalGaps(h: InboxHours, gapDays = 7): ArrivalGap[] {
  const from = h.currentHour - gapDays * 24 * HOUR_MS;
  const missing = new Set(h.missing);
  const byEndpoint = new Map<string, InboxHour[]>();
  for (const r of h.hours) {
    const key = `${r.provider}\u0000${r.endpoint}`;
    byEndpoint.set(key, [...(byEndpoint.get(key) ?? []), r]);
  }
  return [...byEndpoint.values()].map((rows) => {
    rows.sort((a, b) => a.hour - b.hour);
    let longest: number | null = null;
    let previous: InboxHour | undefined;
    for (const r of rows) {
      if (r.hour < from) continue;
      const known = previous !== undefined && ![...missing].some((m) => m > previous!.hour && m < r.hour);
      const gaps = [r.maxGapMs, known ? r.firstReceived - previous!.lastReceived : null].filter((g): g is number => g !== null);
      for (const g of gaps) longest = Math.max(longest ?? 0, g);
      previous = r;
    }
    const last = rows.at(-1)!;
    const lastReceived = Math.max(...rows.map((r) => r.lastReceived));
    return {
      provider: last.provider,
      endpoint: last.endpoint,
      lastReceived,
      silenceMs: Math.max(0, h.now - lastReceived),
      longestGapMs: longest,
    };
  });
}
