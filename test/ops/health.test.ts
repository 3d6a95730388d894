// Thirty days of health from the hourly rollup (src/inbox/hours.ts, src/ops/health.ts) against the same
// figures computed row by row from the state rows: per day received, failed, needs-review, backlog peak
// and latency; an hour computed again once its unsettled rows settle; the fill's bound; the longest
// silence between arrivals.
import { afterAll, beforeEach, expect, test } from "bun:test";
import { arrivalGaps, fillInboxHours, readInboxHours, SETTLE_MS } from "../../src/inbox/hours.ts";
import { endpointHealth, readHealth, type DayHealth } from "../../src/ops/health.ts";
import { freshDatabase } from "../support/helpers.ts";

const fresh = await freshDatabase();
const db = fresh.db;
afterAll(() => fresh.drop());
beforeEach(async () => {
  await db`truncate webhook_inbox, webhook_inbox_payloads, webhook_inbox_hours, webhook_inbox_hours_filled`;
});

const HOUR = 3_600_000;
const DAY = 24 * HOUR;

interface Row {
  endpoint: string;
  eventId: string;
  received: number;
  processed: number | null;
  outcome: "processed" | "ignored" | "resolved" | null;
  attempts: number;
  parked: boolean;
  lastError: string | null;
}

/** A small deterministic generator (mulberry32), so a failure can be replayed. */
function random(seed: number): () => number {
  let a = seed;
  return () => {
    a = (a + 0x6d2b79f5) | 0;
    let t = Math.imul(a ^ (a >>> 15), 1 | a);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/**
 * The database's now(), 20 s or more away from an hour's end and from the moment the hour before may be
 * kept (SETTLE_MS into the hour): a test reads and fills twice and expects the same hours each time.
 */
async function dbNow(): Promise<number> {
  for (;;) {
    const [row] = await db<{ now: Date }[]>`select now()`;
    const now = row!.now.getTime();
    const into = now % HOUR;
    if (into < HOUR - 20_000 && (into < SETTLE_MS - 20_000 || into > SETTLE_MS)) return now;
    await Bun.sleep(21_000);
  }
}

/** The start of the hours read live at `now`: the first hour not kept yet. */
const liveFrom = (now: number) => Math.floor((now - SETTLE_MS) / HOUR) * HOUR;

/** `n` rows over the last `spanMs` before `now`, of every kind: quick, late, retried, ignored, resolved, parked, waiting. */
function makeRows(now: number, n: number, spanMs: number, seed: number): Row[] {
  const next = random(seed);
  const rows: Row[] = [];
  for (let i = 0; i < n; i++) {
    const endpoint = next() < 0.7 ? "billing" : "payments";
    const received = Math.floor(now - 1 - next() * spanMs);
    const kind = next();
    const settle = (latency: number, outcome: Row["outcome"], attempts: number): Row => {
      const processed = received + latency;
      return processed < now
        ? { endpoint, eventId: `evt_h${seed}_${i}`, received, processed, outcome, attempts, parked: false, lastError: null }
        : { endpoint, eventId: `evt_h${seed}_${i}`, received, processed: null, outcome: null, attempts, parked: false, lastError: null };
    };
    if (kind < 0.55) rows.push(settle(Math.floor(next() * 3_000), "processed", 1));
    else if (kind < 0.65) rows.push(settle(Math.floor(HOUR + next() * 4 * HOUR), "processed", 1));
    else if (kind < 0.72) rows.push(settle(Math.floor(next() * 60_000), "processed", 3));
    else if (kind < 0.82) rows.push(settle(0, "ignored", 0));
    else if (kind < 0.86) rows.push(settle(2 * HOUR, "resolved", 10));
    else if (kind < 0.92)
      rows.push({
        endpoint,
        eventId: `evt_h${seed}_${i}`,
        received,
        processed: null,
        outcome: null,
        attempts: 10,
        parked: true,
        lastError: "Error: boom",
      });
    else
      rows.push({
        endpoint,
        eventId: `evt_h${seed}_${i}`,
        received,
        processed: null,
        outcome: null,
        attempts: kind < 0.96 ? 0 : 2,
        parked: false,
        lastError: kind < 0.96 ? null : "Error: once",
      });
  }
  return rows;
}

async function insert(rows: readonly Row[]): Promise<void> {
  await db`
    insert into webhook_inbox ${db(
      rows.map((r) => ({
        provider: "stripe",
        endpoint: r.endpoint,
        event_id: r.eventId,
        event_type: "invoice.paid",
        received_at: new Date(r.received),
        available_at: new Date(r.received),
        processed_at: r.processed === null ? null : new Date(r.processed),
        outcome: r.outcome,
        attempts: r.attempts,
        needs_review_at: r.parked ? new Date(r.received + 1000) : null,
        last_error: r.lastError ?? (r.outcome === "resolved" ? "Error: boom" : null),
        resolution_note: r.outcome === "resolved" ? "fixed by hand" : null,
      })),
    )}
  `;
}

/** 95th percentile as PostgreSQL's percentile_disc takes it: the first value whose cumulative share reaches 0.95. */
function p95(values: number[]): number | null {
  if (values.length === 0) return null;
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.ceil(0.95 * sorted.length) - 1]!;
}

/** The days of `endpoint` computed row by row: what endpointHealth must agree with. */
function expectedDays(rows: readonly Row[], endpoint: string, now: number, days: number): Omit<DayHealth, "complete">[] {
  const current = Math.floor(now / HOUR) * HOUR;
  const firstDay = Math.floor(now / DAY) * DAY - (days - 1) * DAY;
  const mine = rows.filter((r) => r.endpoint === endpoint);
  return Array.from({ length: days }, (_, i) => {
    const day = firstDay + i * DAY;
    const of = mine.filter((r) => r.received >= day && r.received < day + DAY);
    const processed = of.filter((r) => r.outcome === "processed");
    const hourly = new Map<number, number[]>();
    for (const r of processed) {
      const h = Math.floor(r.received / HOUR) * HOUR;
      hourly.set(h, [...(hourly.get(h) ?? []), r.processed! - r.received]);
    }
    const p95s = [...hourly.values()].map((v) => p95(v)!);
    // Every hour's end in the day up to the current hour, whose "end" is now.
    let backlogPeak = 0;
    for (let h = day; h < day + DAY && h <= current; h += HOUR) {
      // The current hour's end is the moment of the read: rows unsettled then.
      const unsettled =
        h === current
          ? mine.filter((r) => r.processed === null).length
          : mine.filter((r) => r.received < h + HOUR && (r.processed === null || r.processed >= h + HOUR)).length;
      backlogPeak = Math.max(backlogPeak, unsettled);
    }
    return {
      day,
      received: of.length,
      failed: of.filter((r) => r.parked || r.outcome === "resolved" || r.attempts > 1 || (r.processed === null && r.lastError !== null))
        .length,
      needsReview: of.filter((r) => r.parked || r.outcome === "resolved").length,
      backlogPeak,
      latencyP95Ms: p95s.length ? Math.max(...p95s) : null,
      latencyMaxMs: processed.length ? Math.max(...processed.map((r) => r.processed! - r.received)) : null,
    };
  });
}

test("`readHealth()` gives per day the rows received, failed, needing review, the backlog peak and latency that a scan of the rows gives", async () => {
  const now = await dbNow();
  const rows = makeRows(now, 900, 3 * DAY, 7);
  await insert(rows);
  const { endpoints, missingHours } = await readHealth(db, [{ provider: "stripe", name: "quiet" }], { days: 5, fillHours: 500 });
  expect(missingHours).toBe(0);
  expect(endpoints.map((e) => e.endpoint).sort()).toEqual(["billing", "payments", "quiet"]);
  for (const endpoint of ["billing", "payments"]) {
    const got = endpoints.find((e) => e.endpoint === endpoint)!;
    expect(got.days.map(({ complete, ...d }) => d)).toEqual(expectedDays(rows, endpoint, now, 5));
    expect(got.days.every((d) => d.complete)).toBe(true);
  }
  const quiet = endpoints.find((e) => e.endpoint === "quiet")!;
  expect(quiet.days.every((d) => d.received === 0 && d.backlogPeak === 0)).toBe(true);
  expect(quiet.lastReceived).toBeNull();
  // The sums are real: waiting and parked rows exist, some settled hours after they arrived.
  const sum = (k: "received" | "needsReview" | "backlogPeak") => endpoints.flatMap((e) => e.days).reduce((n, d) => n + d[k], 0);
  expect(sum("received")).toBe(900);
  expect(sum("needsReview")).toBeGreaterThan(20);
  expect(sum("backlogPeak")).toBeGreaterThan(20);
});

test("an hour is computed again once rows unsettled when it was computed settle, and its figures follow", async () => {
  const now = await dbNow();
  const rows = makeRows(now, 400, 2 * DAY, 11);
  await insert(rows);
  await fillInboxHours(db, { maxHours: 500, days: 3 });
  // An operator resolves the parked rows and a worker applies the waiting ones of closed hours.
  const closed = Math.floor(now / HOUR) * HOUR;
  const settledNow = now + 1;
  for (const r of rows)
    if (r.processed === null && r.received < closed) {
      r.processed = settledNow;
      r.outcome = r.parked ? "resolved" : "processed";
      r.parked = false;
    }
  await db`
    update webhook_inbox
       set processed_at = ${new Date(settledNow)},
           outcome = case when needs_review_at is not null then 'resolved' else 'processed' end,
           resolution_note = case when needs_review_at is not null then 'fixed by hand' end,
           last_error = case when needs_review_at is not null then last_error end,
           needs_review_at = null
     where processed_at is null
       and received_at < ${new Date(closed)}
  `;
  const stale = await db<
    { n: number }[]
  >`select count(distinct hour)::int as n from webhook_inbox_hours where open > 0 and hour < ${new Date(closed)}`;
  expect(stale[0]!.n).toBeGreaterThan(3);
  expect(await fillInboxHours(db, { maxHours: 500, days: 3 })).toBe(stale[0]!.n);
  const health = endpointHealth(await readInboxHours(db, 3), 3);
  for (const endpoint of ["billing", "payments"])
    expect(health.find((e) => e.endpoint === endpoint)!.days.map(({ complete, ...d }) => d)).toEqual(expectedDays(rows, endpoint, now, 3));
  // Nothing changed since: the next fill computes nothing.
  expect(await fillInboxHours(db, { maxHours: 500, days: 3 })).toBe(0);
});

test("`fillInboxHours()` computes at most maxHours per call, newest first; the days it has not reached say so", async () => {
  const now = await dbNow();
  await insert(makeRows(now, 200, 2 * DAY, 3));
  expect(await fillInboxHours(db, { maxHours: 10, days: 2 })).toBe(10);
  const hours = await readInboxHours(db, 2);
  const closed = liveFrom(now);
  // The 10 newest hours that may be kept are computed; the rest are missing, newest first.
  expect(hours.missing[0]).toBe(closed - 11 * HOUR);
  expect(hours.missing.length).toBe(2 * 24 - 10);
  const health = endpointHealth(hours, 2);
  expect(health[0]!.days.map((d) => d.complete)).toEqual([false, closed - 10 * HOUR <= Math.floor(now / DAY) * DAY]);
});

test("`arrivalGaps()` gives the newest arrival and the longest silence between two arrivals over 7 days, not across an hour not computed", async () => {
  const now = await dbNow();
  const closed = Math.floor(now / HOUR) * HOUR;
  const at = (ms: number, i: number): Row => ({
    endpoint: "billing",
    eventId: `evt_gap_${i}`,
    received: ms,
    processed: ms,
    outcome: "processed",
    attempts: 0,
    parked: false,
    lastError: null,
  });
  // Arrivals every 10 min, one silence of 3 h 40 min two days ago, one arrival 8 days ago (outside the 7 days).
  const times = [closed - 8 * DAY];
  for (let t = closed - 3 * DAY; t < now; t += 10 * 60_000) if (t < closed - 2 * DAY || t > closed - 2 * DAY + 200 * 60_000) times.push(t);
  await insert(times.map(at));
  await fillInboxHours(db, { maxHours: 2000, days: 30 });
  const [gap] = arrivalGaps(await readInboxHours(db, 30));
  expect(gap).toMatchObject({ provider: "stripe", endpoint: "billing", lastReceived: Math.max(...times), longestGapMs: 220 * 60_000 });
  expect(gap!.silenceMs).toBeGreaterThanOrEqual(now - Math.max(...times));
  // With the hours of that silence not computed, it is not known: the longest is the 10 minutes between the others.
  await db`delete from webhook_inbox_hours_filled where hour = ${new Date(closed - 2 * DAY + 2 * HOUR)}`;
  await db`delete from webhook_inbox_hours where hour = ${new Date(closed - 2 * DAY + 2 * HOUR)}`;
  const [partial] = arrivalGaps(await readInboxHours(db, 30));
  expect(partial?.longestGapMs).toBe(10 * 60_000);
});
