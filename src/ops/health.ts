// Thirty days of an endpoint's health, per day: what the operator's page charts. Built from the hourly
// rollup (inbox/hours.ts), never from a scan of the window's rows.
import type { Db } from "../db/db.ts";
import { arrivalGaps, fillInboxHours, readInboxHours, type ArrivalGap, type InboxHours } from "../inbox/hours.ts";

const HOUR_MS = 3_600_000;
const DAY_MS = 24 * HOUR_MS;

/** One UTC day of one endpoint. Counts are rows received that day unless said otherwise. */
export interface DayHealth {
  /** Start of the day (UTC midnight), ms since the epoch. */
  day: number;
  received: number;
  /** Rows that failed at least once: settled after more than one attempt, resolved by hand, or unsettled with a failed attempt or parked. */
  failed: number;
  /** Rows parked for an operator now, or closed by one (`inbox resolve`). */
  needsReview: number;
  /** The most rows unsettled (waiting for a worker or parked) at any hour's end that day, and now for today. */
  backlogPeak: number;
  /** The day's worst hour's 95th percentile of processed_at − received_at of processed rows, ms; null: none processed. */
  latencyP95Ms: number | null;
  /** The longest processed_at − received_at of the day's processed rows, ms; null: none. */
  latencyMaxMs: number | null;
  /** False while some closed hour of the day is not computed yet (its rows are missing from the counts). */
  complete: boolean;
}

/** One endpoint's days, oldest first, and its arrivals' newest and longest silence. */
export interface EndpointHealth {
  provider: string;
  endpoint: string;
  days: DayHealth[];
  /** The newest arrival (ms), null when none in the window. */
  lastReceived: number | null;
  /** Time since it by the database's clock, ms; null when none. */
  silenceMs: number | null;
  /** The longest silence between two arrivals over the last 7 days, ms; null: not known. */
  longestGapMs: number | null;
}

/**
 * The last `days` days (default 30, today included) of every endpoint that received anything in them or
 * has unsettled rows: first computes up to `fillHours` closed hours the rollup lacks or that changed
 * (inbox/hours.ts `fillInboxHours`, default 24: a first page load after an upgrade computes the newest
 * day, later loads and every /metrics scrape go on), then reads the rollup. `endpoints` (configured ones) are listed even when
 * empty.
 */
export async function readHealth(
  db: Db,
  endpoints: readonly { provider: string; name: string }[],
  options: { days?: number; fillHours?: number } = {},
): Promise<{ endpoints: EndpointHealth[]; missingHours: number }> {
  const days = options.days ?? 30;
  await fillInboxHours(db, { maxHours: options.fillHours ?? 24, days });
  const hours = await readInboxHours(db, days);
  return { endpoints: endpointHealth(hours, days, endpoints), missingHours: hours.missing.length };
}

/**
 * {@link DayHealth} per day and endpoint from the hourly rollup. The backlog at each hour's end counts,
 * for every earlier hour, its rows unsettled now and its rows that settled after that moment
 * (`settledLater`); unsettled rows received before the window count from its start.
 */
export function endpointHealth(
  h: InboxHours,
  days: number,
  configured: readonly { provider: string; name: string }[] = [],
): EndpointHealth[] {
  const firstDay = Math.floor(h.currentHour / DAY_MS) * DAY_MS - (days - 1) * DAY_MS;
  const slots = (h.currentHour - firstDay) / HOUR_MS + 1; // hours from the first day's midnight to the current hour
  const index = (t: number) => Math.floor((t - firstDay) / HOUR_MS);
  const keys = new Map<string, { provider: string; endpoint: string }>();
  for (const c of configured) keys.set(`${c.provider}\u0000${c.name}`, { provider: c.provider, endpoint: c.name });
  for (const r of [...h.hours, ...h.open]) keys.set(`${r.provider}\u0000${r.endpoint}`, { provider: r.provider, endpoint: r.endpoint });
  const gaps = new Map<string, ArrivalGap>(arrivalGaps(h).map((g) => [`${g.provider}\u0000${g.endpoint}`, g]));
  const missingDays = new Set(h.missing.map((m) => Math.floor(m / DAY_MS) * DAY_MS));
  return [...keys.entries()].map(([key, k]) => {
    const mine = h.hours.filter((r) => r.provider === k.provider && r.endpoint === k.endpoint && r.hour >= firstDay);
    const open = h.open.filter((o) => o.provider === k.provider && o.endpoint === k.endpoint);
    const out: DayHealth[] = Array.from({ length: days }, (_, i) => ({
      day: firstDay + i * DAY_MS,
      received: 0,
      failed: 0,
      needsReview: 0,
      backlogPeak: 0,
      latencyP95Ms: null,
      latencyMaxMs: null,
      complete: !missingDays.has(firstDay + i * DAY_MS),
    }));
    const dayOf = (t: number) => out[Math.floor((t - firstDay) / DAY_MS)];
    // diff[b]: change of the backlog at boundary b, the end of hour b − 1 (b = slots: now).
    const diff = new Array<number>(slots + 1).fill(0);
    for (const r of mine) {
      const d = dayOf(r.hour)!;
      d.received += r.received;
      d.failed += r.failed;
      d.needsReview += r.resolved;
      if (r.latencyP95Ms !== null) d.latencyP95Ms = Math.max(d.latencyP95Ms ?? 0, r.latencyP95Ms);
      if (r.latencyMaxMs !== null) d.latencyMaxMs = Math.max(d.latencyMaxMs ?? 0, r.latencyMaxMs);
      for (const [settled, n] of r.settledLater) {
        diff[index(r.hour) + 1]! += n;
        diff[Math.min(slots, index(settled) + 1)]! -= n;
      }
    }
    for (const o of open) {
      const d = o.hour >= firstDay ? dayOf(o.hour) : undefined;
      if (d) {
        d.failed += o.failed;
        d.needsReview += o.parked;
      }
      diff[o.hour >= firstDay ? index(o.hour) + 1 : 0]! += o.waiting + o.parked;
    }
    let backlog = 0;
    for (let b = 0; b <= slots; b++) {
      backlog += diff[b]!;
      // Boundary b closes hour b − 1; boundary 0 (the window's start) belongs to no day of it.
      const d = b > 0 ? dayOf(firstDay + (b - 1) * HOUR_MS) : undefined;
      if (d) d.backlogPeak = Math.max(d.backlogPeak, backlog);
    }
    const gap = gaps.get(key);
    return {
      ...k,
      days: out,
      lastReceived: gap?.lastReceived ?? null,
      silenceMs: gap?.silenceMs ?? null,
      longestGapMs: gap?.longestGapMs ?? null,
    };
  });
}
