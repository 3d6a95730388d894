// The operator functions of src/ops/ against real PostgreSQL: status, list, show, requeue, replay,
// purge and parseDuration. Rows get their states through the real code paths (receiveSync,
// receiveAsync, claimBatch + processClaim); only their timestamps are moved back with plain UPDATEs.
import { afterAll, beforeEach, describe, expect, test } from "bun:test";
import { claimBatch } from "../../src/worker/claim.ts";
import { connect } from "../../src/db/db.ts";
import { PermanentError, type HandlerTable } from "../../src/handlers/handler-table.ts";
import { billingHandlers } from "../../src/handlers/billing.ts";
import { listEvents, showEvent } from "../../src/ops/events.ts";
import { parseDuration } from "../../src/ops/filter.ts";
import { purge, RetentionTooShortError } from "../../src/ops/purge.ts";
import { replayEvent } from "../../src/ops/replay.ts";
import { handlerTable } from "../../src/handlers/handler-table.ts";
import { requeue } from "../../src/ops/requeue.ts";
import { readBacklog } from "../../src/inbox/backlog.ts";
import { inboxStatus, type Arrivals } from "../../src/ops/status.ts";
import { processClaim } from "../../src/worker/process-claim.ts";
import { receiveAsync, receiveSync, type ReceiveTarget } from "../../src/receiver/receive.ts";
import { runWorker } from "../../src/worker/worker.ts";
import { count, eventBody, freshDatabase, invoice, verified } from "../support/helpers.ts";
import { waitUntil } from "../support/wait-until.ts";

const fresh = await freshDatabase();
const db = fresh.db;
afterAll(() => fresh.drop());
beforeEach(async () => {
  await db`truncate webhook_inbox, outbox, ledger_entries, invoices`;
});

const BILLING: ReceiveTarget = { provider: "stripe", endpoint: "billing", handlers: billingHandlers };
const PAYMENTS: ReceiveTarget = { ...BILLING, endpoint: "payments" };
/** A long backoff: a failed row is surely not due again until something makes it due. */
const BACKOFF = { baseMs: 60_000, capMs: 600_000 };
const MINUTE_MS = 60_000;
const DAY_MS = 86_400_000;
/** Per-test limit for the test that runs a worker (its wait is bounded at 10 s). */
const WAITS = 30_000;

class NamedError extends Error {
  constructor(name: string, message: string) {
    super(message);
    this.name = name;
  }
}

/** An event sent in a test: its id, the invoice it carries and its exact body. */
interface Sent {
  eventId: string;
  invoiceId: string;
  body: string;
}

let seq = 0;
function event(type: string): Sent {
  const n = ++seq;
  const eventId = `evt_ops_${n}`;
  const invoiceId = `in_ops_${n}`;
  return {
    eventId,
    invoiceId,
    body: eventBody(eventId, type, invoice({ id: invoiceId, customer: "cus_payload_marker", amount_paid: 2000, status: "paid" })),
  };
}

/** A row settled `processed` by the sync receiver (its handler ran). */
async function processedRow(type = "invoice.paid", target = BILLING): Promise<Sent> {
  const e = event(type);
  expect(await receiveSync(db, target, verified(e.body))).toBe("processed");
  return e;
}

/** A row settled `ignored` by the sync receiver (no handler for its type). */
async function ignoredRow(target = BILLING): Promise<Sent> {
  const e = event("customer.created");
  expect(await receiveSync(db, target, verified(e.body))).toBe("ignored");
  return e;
}

/** A row queued for a worker by the async receiver. */
async function unprocessedRow(type = "invoice.paid", target = BILLING): Promise<Sent> {
  const e = event(type);
  expect(await receiveAsync(db, target, verified(e.body))).toBe("queued");
  return e;
}

/**
 * A row queued, claimed and failed once by `error` through processClaim: parked as needs-review
 * (`park`: attempt limit 1, or any PermanentError), or left unprocessed with `last_error` and a backoff.
 * Claims the oldest due row, so make these rows before queueing unprocessed ones (checked).
 */
async function failedRow(error: Error, options: { park: boolean; type?: string; target?: ReceiveTarget }): Promise<Sent> {
  const type = options.type ?? "invoice.paid";
  const e = await unprocessedRow(type, options.target ?? BILLING);
  const maxAttempts = options.park ? 1 : 10;
  const [claim] = await claimBatch(db, { limit: 1, leaseMs: 60_000, maxAttempts });
  if (!claim || claim.eventId !== e.eventId)
    throw new Error(`Cannot fail ${e.eventId}: another due row was claimed first (make failed rows before unprocessed ones)`);
  const failing: HandlerTable = {
    [type]: async () => {
      throw error;
    },
  };
  const result = await processClaim(db, claim, { tables: { stripe: failing }, timeoutMs: 5_000, maxAttempts, backoff: BACKOFF });
  expect(result.outcome).toBe(options.park ? "needs_review" : "failed");
  return e;
}

const needsReviewRow = (error: Error, type = "invoice.paid", target = BILLING) => failedRow(error, { park: true, type, target });

/** Moves a row's received_at and event_created_at (and processed_at / needs_review_at when set) `ms` into the past. */
async function backdate(eventId: string, ms: number): Promise<void> {
  await db`
    update webhook_inbox
       set received_at = now() - ${ms} * interval '1 millisecond',
           event_created_at = date_trunc('second', now() - ${ms} * interval '1 millisecond'),
           processed_at = case when processed_at is not null then now() - ${ms} * interval '1 millisecond' end,
           needs_review_at = case when needs_review_at is not null then now() - ${ms} * interval '1 millisecond' end
     where event_id = ${eventId}
  `;
}

interface StateRow {
  state: string;
  event_type: string;
  attempts: number;
  received_at: Date;
  available_at: Date;
  processed_at: Date | null;
  needs_review_at: Date | null;
  last_error: string | null;
  outcome: string | null;
  /** available_at <= now() */
  due: boolean;
  payload: Record<string, unknown> | null;
  payload_dropped_at: Date | null;
}

const keyOf = (e: Sent, endpoint = "billing") => `${endpoint}/${e.eventId}`;

/** Every inbox row, keyed `endpoint/event_id`. */
async function rows(): Promise<Record<string, StateRow>> {
  const all = await db<(StateRow & { endpoint: string; event_id: string })[]>`
    select s.endpoint, s.event_id, s.state, s.event_type, s.attempts, s.received_at, s.available_at, s.processed_at,
           s.needs_review_at, s.last_error, s.outcome, s.available_at <= now() as due, w.payload, s.payload_dropped_at
      from webhook_inbox_state s
      join webhook_inbox w using (provider, endpoint, event_id)
  `;
  return Object.fromEntries(all.map(({ endpoint, event_id, ...row }) => [`${endpoint}/${event_id}`, row]));
}

async function row(key: string): Promise<StateRow> {
  const found = (await rows())[key];
  if (!found) throw new Error(`No inbox row ${key}`);
  return found;
}

const ids = (list: { eventId: string }[]) => list.map((r) => r.eventId);

describe("inboxStatus() and readBacklog()", () => {
  test("`readBacklog()` counts unprocessed and needs-review rows per endpoint, with the age of the oldest unprocessed one", async () => {
    const parkedLongAgo = await needsReviewRow(new PermanentError("Cannot apply invoice event: missing or invalid field(s) customer"));
    await needsReviewRow(new NamedError("LedgerLockedError", "Ledger is locked"));
    await needsReviewRow(new NamedError("LedgerLockedError", "Ledger is locked"), "invoice.paid", PAYMENTS);
    const oldest = await unprocessedRow();
    await unprocessedRow();
    await unprocessedRow("invoice.created");
    const paymentsWaiting = await unprocessedRow("invoice.paid", PAYMENTS);
    await processedRow();
    await ignoredRow();
    await processedRow("invoice.paid", PAYMENTS);
    await backdate(oldest.eventId, 2 * 3_600_000);
    await backdate(paymentsWaiting.eventId, 10 * MINUTE_MS);
    await backdate(parkedLongAgo.eventId, 5 * 3_600_000); // parked rows do not make the unprocessed age

    const backlog = await readBacklog(db);
    expect(backlog.map(({ oldestUnprocessedAgeSec: _, ...b }) => b)).toEqual([
      { provider: "stripe", endpoint: "billing", unprocessed: 3, needsReview: 2 },
      { provider: "stripe", endpoint: "payments", unprocessed: 1, needsReview: 1 },
    ]);
    const [billing, payments] = backlog;
    expect(billing?.oldestUnprocessedAgeSec).toBeGreaterThanOrEqual(7_200);
    expect(billing?.oldestUnprocessedAgeSec).toBeLessThan(7_200 + 600);
    expect(payments?.oldestUnprocessedAgeSec).toBeGreaterThanOrEqual(600);
    expect(payments?.oldestUnprocessedAgeSec).toBeLessThan(600 + 600);
  });

  test("`readBacklog()` reports an age of 0 for an endpoint whose only backlog is needs-review rows", async () => {
    await needsReviewRow(new NamedError("LedgerLockedError", "Ledger is locked"));
    expect(await readBacklog(db)).toEqual([
      { provider: "stripe", endpoint: "billing", unprocessed: 0, oldestUnprocessedAgeSec: 0, needsReview: 1 },
    ]);
  });

  test("`inboxStatus()` counts arrivals per event type and endpoint in the window, not rows received before it", async () => {
    await needsReviewRow(new NamedError("LedgerLockedError", "Ledger is locked"));
    const oldWaiting = await unprocessedRow();
    await unprocessedRow();
    await processedRow();
    await processedRow();
    const oldDone = await processedRow();
    await processedRow("invoice.created");
    await ignoredRow();
    await processedRow("invoice.paid", PAYMENTS);
    await backdate(oldWaiting.eventId, 2 * 3_600_000);
    await backdate(oldDone.eventId, 2 * 3_600_000);

    const byKey = (a: Arrivals) => `${a.endpoint} ${a.eventType}`;
    const sorted = (list: Arrivals[]) => [...list].sort((a, b) => byKey(a).localeCompare(byKey(b)));
    const arrival = (endpoint: string, eventType: string, counts: Partial<Arrivals>): Arrivals => ({
      provider: "stripe",
      endpoint,
      eventType,
      received: 0,
      processed: 0,
      ignored: 0,
      ignoredMode: 0,
      resolved: 0,
      unprocessed: 0,
      needsReview: 0,
      ...counts,
    });

    const status = await inboxStatus(db);
    expect(status.windowSec).toBe(3_600);
    expect(sorted(status.arrivals)).toEqual([
      arrival("billing", "customer.created", { received: 1, ignored: 1 }),
      arrival("billing", "invoice.created", { received: 1, processed: 1 }),
      arrival("billing", "invoice.paid", { received: 4, processed: 2, unprocessed: 1, needsReview: 1 }),
      arrival("payments", "invoice.paid", { received: 1, processed: 1 }),
    ]);
    // The backlog is not windowed: the 2-hour-old unprocessed row still waits.
    expect(status.backlog.map(({ oldestUnprocessedAgeSec: _, ...b }) => b)).toEqual([
      { provider: "stripe", endpoint: "billing", unprocessed: 2, needsReview: 1 },
    ]);

    const wider = await inboxStatus(db, 3 * 3_600);
    expect(wider.windowSec).toBe(3 * 3_600);
    expect(wider.arrivals.find((a) => byKey(a) === "billing invoice.paid")).toEqual(
      arrival("billing", "invoice.paid", { received: 6, processed: 3, unprocessed: 2, needsReview: 1 }),
    );
  });
});

describe("listEvents()", () => {
  /** Eight rows in every state at two endpoints, received one minute apart in `newestFirst` order. */
  async function seed() {
    const quota = await needsReviewRow(new NamedError("QuotaError", "quota 100% used"));
    const quotaLike = await needsReviewRow(new NamedError("QuotaError", "quota at 100 of 200 used"), "invoice.finalized");
    const rateLimit = await needsReviewRow(new NamedError("RateError", "rate_limit exceeded"), "invoice.paid", PAYMENTS);
    const rateDash = await needsReviewRow(new NamedError("RateError", "rate-limit exceeded"), "invoice.paid", PAYMENTS);
    const waiting = await unprocessedRow();
    const waitingPayments = await unprocessedRow("invoice.created", PAYMENTS);
    const done = await processedRow();
    const skipped = await ignoredRow();
    const newestFirst = [done, rateDash, waiting, quota, skipped, rateLimit, waitingPayments, quotaLike];
    for (const [i, e] of newestFirst.entries()) await backdate(e.eventId, (i + 1) * MINUTE_MS);
    return { quota, quotaLike, rateLimit, rateDash, waiting, waitingPayments, done, skipped, newestFirst };
  }

  test("`listEvents()` returns rows newest first with their metadata, never a payload field", async () => {
    const s = await seed();
    const list = await listEvents(db, {});
    expect(ids(list)).toEqual(ids(s.newestFirst));
    const summaryKeys = [
      "attempts",
      "availableAt",
      "endpoint",
      "eventId",
      "eventType",
      "lastError",
      "needsReviewAt",
      "payloadDropped",
      "processedAt",
      "provider",
      "receivedAt",
      "state",
    ];
    for (const r of list) expect(Object.keys(r).sort()).toEqual(summaryKeys);
    expect(JSON.stringify(list)).not.toContain("cus_payload_marker");
    const byId = new Map(list.map((r) => [r.eventId, r]));
    expect(byId.get(s.done.eventId)).toMatchObject({
      endpoint: "billing",
      eventType: "invoice.paid",
      state: "processed",
      lastError: null,
      payloadDropped: false,
    });
    expect(byId.get(s.skipped.eventId)).toMatchObject({ eventType: "customer.created", state: "ignored" });
    expect(byId.get(s.waiting.eventId)).toMatchObject({ state: "unprocessed", attempts: 0, processedAt: null, needsReviewAt: null });
    const parked = byId.get(s.rateLimit.eventId);
    expect(parked).toMatchObject({
      endpoint: "payments",
      state: "needs_review",
      attempts: 1,
      lastError: "RateError: rate_limit exceeded",
      processedAt: null,
    });
    expect(Number.isNaN(Date.parse(parked?.needsReviewAt ?? ""))).toBe(false);
  });

  test("`listEvents()` filters by state needs_review and by state unprocessed", async () => {
    const s = await seed();
    expect(ids(await listEvents(db, { state: "needs_review" }))).toEqual(ids([s.rateDash, s.quota, s.rateLimit, s.quotaLike]));
    expect(ids(await listEvents(db, { state: "unprocessed" }))).toEqual(ids([s.waiting, s.waitingPayments]));
    expect(ids(await listEvents(db, { state: "ignored" }))).toEqual(ids([s.skipped]));
  });

  test("`listEvents()` filters by event type, endpoint and since, and the filters combine", async () => {
    const s = await seed();
    expect(ids(await listEvents(db, { eventType: "invoice.finalized" }))).toEqual(ids([s.quotaLike]));
    expect(ids(await listEvents(db, { eventType: "invoice.created" }))).toEqual(ids([s.waitingPayments]));
    expect(ids(await listEvents(db, { endpoint: "payments" }))).toEqual(ids([s.rateDash, s.rateLimit, s.waitingPayments]));
    expect(ids(await listEvents(db, { since: new Date(Date.now() - 3.5 * MINUTE_MS) }))).toEqual(ids([s.done, s.rateDash, s.waiting]));
    expect(ids(await listEvents(db, { state: "needs_review", endpoint: "billing" }))).toEqual(ids([s.quota, s.quotaLike]));
    expect(
      ids(await listEvents(db, { eventType: "invoice.paid", endpoint: "payments", since: new Date(Date.now() - 3.5 * MINUTE_MS) })),
    ).toEqual(ids([s.rateDash]));
    expect(await listEvents(db, { endpoint: "nowhere" })).toEqual([]);
  });

  test("`listEvents()` matches `error` as a case-insensitive substring with `%` and `_` taken literally", async () => {
    const s = await seed();
    expect(ids(await listEvents(db, { error: "QUOTA" }))).toEqual(ids([s.quota, s.quotaLike]));
    expect(ids(await listEvents(db, { error: "100%" }))).toEqual(ids([s.quota]));
    expect(ids(await listEvents(db, { error: "%" }))).toEqual(ids([s.quota]));
    expect(ids(await listEvents(db, { error: "rate_limit" }))).toEqual(ids([s.rateLimit]));
    expect(ids(await listEvents(db, { error: "_" }))).toEqual(ids([s.rateLimit]));
    expect(ids(await listEvents(db, { error: "rate-limit" }))).toEqual(ids([s.rateDash]));
    expect(ids(await listEvents(db, { error: "\\" }))).toEqual([]);
  });

  test("`listEvents()` returns at most `limit` rows, the newest", async () => {
    const s = await seed();
    expect(ids(await listEvents(db, {}, 3))).toEqual(ids(s.newestFirst.slice(0, 3)));
    expect(ids(await listEvents(db, { state: "needs_review" }, 1))).toEqual(ids([s.rateDash]));
  });
});

describe("showEvent()", () => {
  test("`showEvent()` returns one row per endpoint that received the event, with the payload only on request", async () => {
    const e = event("invoice.paid");
    expect(await receiveSync(db, BILLING, verified(e.body))).toBe("processed");
    expect(await receiveAsync(db, PAYMENTS, verified(e.body))).toBe("queued");

    const plain = await showEvent(db, e.eventId);
    expect(plain.map((r) => [r.endpoint, r.eventId, r.eventType, r.state])).toEqual([
      ["billing", e.eventId, "invoice.paid", "processed"],
      ["payments", e.eventId, "invoice.paid", "unprocessed"],
    ]);
    for (const r of plain) expect("payload" in r).toBe(false);
    expect(JSON.stringify(plain)).not.toContain("cus_payload_marker");

    const full = await showEvent(db, e.eventId, true);
    expect(full.map((r) => r.payload)).toEqual([JSON.parse(e.body), JSON.parse(e.body)]);
    expect(full.map(({ payload: _, ...summary }) => summary)).toEqual(plain);
  });

  test("`showEvent()` with the payload shows the exact raw body of an event PostgreSQL could not store as jsonb", async () => {
    const raw = '{"id":"evt_ops_raw","object":"event","type":"invoice.paid","data":{"object":{"description":"a\\u0000b"}}}';
    await db`
      insert into webhook_inbox (provider, endpoint, event_id, event_type, payload, raw_body, needs_review_at, attempts, last_error)
      values ('stripe', 'billing', 'evt_ops_raw', 'invoice.paid', null, ${raw}, now(), 1, 'Payload cannot be stored as jsonb')
    `;
    const [shown] = await showEvent(db, "evt_ops_raw", true);
    expect(shown).toMatchObject({ state: "needs_review", payload: null, rawBody: raw });
    const [plain] = await showEvent(db, "evt_ops_raw");
    expect(plain && "rawBody" in plain).toBe(false);
  });

  test("`showEvent()` of an unknown id returns []", async () => {
    await processedRow();
    expect(await showEvent(db, "evt_ops_unknown")).toEqual([]);
    expect(await showEvent(db, "evt_ops_unknown", true)).toEqual([]);
  });
});

describe("requeue()", () => {
  const LOCKED = "LedgerLockedError: Ledger is locked for the month-end close";
  const MALFORMED = "PermanentError: Cannot apply invoice event: missing or invalid field(s) customer";
  const LIMITED = "RateError: rate_limit exceeded";

  /**
   * Three needs-review rows (billing invoice.paid, billing invoice.finalized, payments invoice.paid) and
   * rows in other states that share their type, endpoint or error: those must never be requeued.
   */
  async function seed() {
    const locked = await needsReviewRow(new NamedError("LedgerLockedError", "Ledger is locked for the month-end close"));
    const malformed = await needsReviewRow(
      new PermanentError("Cannot apply invoice event: missing or invalid field(s) customer"),
      "invoice.finalized",
    );
    const limited = await needsReviewRow(new NamedError("RateError", "rate_limit exceeded"), "invoice.paid", PAYMENTS);
    const retrying = await failedRow(new NamedError("RateError", "rate_limit exceeded"), { park: false });
    const waiting = await unprocessedRow();
    const done = await processedRow();
    return { locked, malformed, limited, retrying, waiting, done };
  }

  /** Requeues with `filter` and checks that exactly `expected` rows went back to the queue and nothing else changed. */
  async function expectRequeued(
    filter: Parameters<typeof requeue>[1],
    expected: { key: string; e: Sent; type: string; endpoint: string; lastError: string }[],
  ) {
    const before = await rows();
    for (const { key } of expected) expect(before[key]).toMatchObject({ state: "needs_review", attempts: 1, due: false });
    const result = await requeue(db, filter, false);
    expect(result.dryRun).toBe(false);
    expect([...result.rows].sort((a, b) => a.eventId.localeCompare(b.eventId))).toEqual(
      expected
        .map(({ e, type, endpoint, lastError }) => ({
          provider: "stripe",
          endpoint,
          eventId: e.eventId,
          eventType: type,
          attempts: 1,
          lastError,
        }))
        .sort((a, b) => a.eventId.localeCompare(b.eventId)),
    );
    const after = await rows();
    for (const { key, lastError } of expected) {
      expect(after[key]).toMatchObject({
        state: "unprocessed",
        attempts: 0,
        needs_review_at: null,
        processed_at: null,
        due: true,
        last_error: lastError,
      });
    }
    const untouched = Object.keys(before).filter((k) => !expected.some((x) => x.key === k));
    for (const k of untouched) expect(after[k]).toEqual(before[k] as StateRow);
  }

  test("`requeue()` dry run lists the matching needs-review rows and changes nothing", async () => {
    const s = await seed();
    const before = await rows();
    const result = await requeue(db, { endpoint: "billing" }, true);
    expect(result).toEqual({
      dryRun: true,
      rows: [
        { provider: "stripe", endpoint: "billing", eventId: s.locked.eventId, eventType: "invoice.paid", attempts: 1, lastError: LOCKED },
        {
          provider: "stripe",
          endpoint: "billing",
          eventId: s.malformed.eventId,
          eventType: "invoice.finalized",
          attempts: 1,
          lastError: MALFORMED,
        },
      ],
    });
    expect(await rows()).toEqual(before);
  });

  test("`requeue()` by type puts back only the needs-review rows of that type: attempts 0, needs_review_at null, due now", async () => {
    const s = await seed();
    await expectRequeued({ eventType: "invoice.paid" }, [
      { key: keyOf(s.locked), e: s.locked, type: "invoice.paid", endpoint: "billing", lastError: LOCKED },
      { key: keyOf(s.limited, "payments"), e: s.limited, type: "invoice.paid", endpoint: "payments", lastError: LIMITED },
    ]);
  });

  test("`requeue()` by error substring leaves an unprocessed row with the same error alone", async () => {
    const s = await seed();
    expect(await row(keyOf(s.retrying))).toMatchObject({ state: "unprocessed", last_error: LIMITED });
    await expectRequeued({ error: "rate_limit" }, [
      { key: keyOf(s.limited, "payments"), e: s.limited, type: "invoice.paid", endpoint: "payments", lastError: LIMITED },
    ]);
  });

  test("`requeue()` by endpoint puts back only that endpoint's needs-review rows", async () => {
    const s = await seed();
    await expectRequeued({ endpoint: "billing" }, [
      { key: keyOf(s.locked), e: s.locked, type: "invoice.paid", endpoint: "billing", lastError: LOCKED },
      { key: keyOf(s.malformed), e: s.malformed, type: "invoice.finalized", endpoint: "billing", lastError: MALFORMED },
    ]);
  });

  test("`requeue()` touches no processed or unprocessed row, whatever `state` the filter asks for", async () => {
    const s = await seed();
    await expectRequeued({ eventId: s.done.eventId, state: "processed" }, []);
    await expectRequeued({ eventId: s.waiting.eventId, state: "unprocessed" }, []);
    await expectRequeued({ eventId: s.retrying.eventId }, []);
  });

  test(
    "`runWorker()` processes a requeued row and books its payment once",
    async () => {
      const s = await seed();
      expect((await requeue(db, { eventId: s.locked.eventId }, false)).rows.map((r) => r.eventId)).toEqual([s.locked.eventId]);
      const controller = new AbortController();
      const pool = connect(fresh.url, { max: 2 });
      const worker = runWorker({
        db: pool,
        tables: { stripe: billingHandlers },
        signal: controller.signal,
        pollMs: 50,
        backoff: BACKOFF,
        log: () => {},
      });
      try {
        await waitUntil("the requeued row processed", async () => (await row(keyOf(s.locked))).state === "processed");
      } finally {
        controller.abort();
        await worker;
        await pool.end({ timeout: 5 });
      }
      expect(await row(keyOf(s.locked))).toMatchObject({
        state: "processed",
        outcome: "processed",
        attempts: 1,
        last_error: null,
        needs_review_at: null,
      });
      expect(await count(db, "ledger_entries", `invoice_id = '${s.locked.invoiceId}'`)).toBe(1);
      expect(await count(db, "outbox", `aggregate_id = '${s.locked.invoiceId}'`)).toBe(1);
      // Rows still parked stay parked: a worker never claims them.
      expect(await row(keyOf(s.malformed))).toMatchObject({ state: "needs_review", attempts: 1 });
      expect(await row(keyOf(s.limited, "payments"))).toMatchObject({ state: "needs_review", attempts: 1 });
    },
    WAITS,
  );
});

describe("replayEvent()", () => {
  const key = (e: Sent, endpoint = "billing") => ({ provider: "stripe", endpoint, eventId: e.eventId });

  /**
   * Runs `fn` on a new single-connection pool. replayEvent() reads its effect from
   * pg_stat_xact_user_tables, so these tests replay on a connection that did nothing before; what an
   * earlier transaction on the same connection does to the counts is the subject of its own test below.
   */
  async function onFreshConnection<T>(fn: (one: typeof db) => Promise<T>): Promise<T> {
    const one = connect(fresh.url, { max: 1 });
    try {
      return await fn(one);
    } finally {
      await one.end({ timeout: 5 });
    }
  }

  test("`replayEvent()` of a processed invoice.paid books nothing new", async () => {
    const paid = await processedRow();
    expect(await count(db, "ledger_entries")).toBe(1);
    expect(await count(db, "outbox")).toBe(1);
    const before = await row(keyOf(paid));

    const result = await onFreshConnection((one) => replayEvent(one, key(paid), billingHandlers));
    expect(result).toEqual({ eventType: "invoice.paid", handled: true, inserted: 0, updated: 0, deleted: 0 });
    expect(await count(db, "ledger_entries")).toBe(1);
    expect(await count(db, "outbox")).toBe(1);
    expect(await count(db, "invoices", `id = '${paid.invoiceId}' and status = 'paid'`)).toBe(1);
    expect(await row(keyOf(paid))).toEqual(before);
  });

  test("`replayEvent()` runs the handler again and counts what it wrote", async () => {
    const created = await processedRow("invoice.created");
    await db`delete from invoices where id = ${created.invoiceId}`;
    const result = await onFreshConnection((one) => replayEvent(one, key(created), billingHandlers));
    expect(result).toEqual({ eventType: "invoice.created", handled: true, inserted: 1, updated: 0, deleted: 0 });
    expect(await count(db, "invoices", `id = '${created.invoiceId}' and status = 'draft'`)).toBe(1);
  });

  test("`replayEvent()` counts only its own transaction's writes, not those of earlier transactions on the same connection", async () => {
    await onFreshConnection(async (one) => {
      await one`select 1`; // the connection's first statement: afterwards its statistics are flushed at most once a second
      const paid = event("invoice.paid");
      expect(await receiveSync(one, BILLING, verified(paid.body))).toBe("processed"); // 4 inserts: inbox, invoice, ledger, outbox
      const result = await replayEvent(one, key(paid), billingHandlers);
      expect(await count(db, "ledger_entries")).toBe(1);
      expect(result).toEqual({ eventType: "invoice.paid", handled: true, inserted: 0, updated: 0, deleted: 0 });
    });
  });

  test("`replayEvent()` refuses an unprocessed row, an unknown row and a row whose payload was dropped, saying why", async () => {
    const parked = await failedRow(new PermanentError("Cannot apply invoice event"), { park: true });
    const waiting = await unprocessedRow();
    const old = await processedRow();
    await backdate(old.eventId, 10 * DAY_MS);
    expect(await purge(db, { olderThanMs: 31 * DAY_MS, payloadsOlderThanMs: 7 * DAY_MS })).toEqual({
      dryRun: false,
      deleted: 0,
      payloadsDropped: 1,
      outboxDeleted: 0,
      claimsDeleted: 0,
      backfillRequestsDeleted: 0,
      partitionsDropped: expect.any(Array),
      openRowsMoved: expect.any(Number),
    });

    await expect(replayEvent(db, key(waiting), billingHandlers)).rejects.toThrow(
      `Cannot replay ${waiting.eventId} at stripe/billing: it is not processed yet`,
    );
    await expect(replayEvent(db, key(parked), billingHandlers)).rejects.toThrow(
      "it is needs-review, not processed (requeue it for the worker, or resolve it)",
    );
    await expect(replayEvent(db, { provider: "stripe", endpoint: "billing", eventId: "evt_ops_unknown" }, billingHandlers)).rejects.toThrow(
      "Cannot replay evt_ops_unknown at stripe/billing: no such inbox row",
    );
    await expect(replayEvent(db, key(old, "payments"), billingHandlers)).rejects.toThrow("no such inbox row");
    await expect(replayEvent(db, key(old), billingHandlers)).rejects.toThrow(
      `Cannot replay ${old.eventId} at stripe/billing: its payload was dropped by retention`,
    );
    expect(await count(db, "ledger_entries")).toBe(1);
    expect(await row(keyOf(waiting))).toMatchObject({ state: "unprocessed", attempts: 0 });
    expect(await row(keyOf(parked))).toMatchObject({ state: "needs_review", attempts: 1 });
  });

  test("`replayEvent()` of an ignored type reports handled=false and writes nothing", async () => {
    const skipped = await ignoredRow();
    const before = await row(keyOf(skipped));
    const result = await onFreshConnection((one) => replayEvent(one, key(skipped), billingHandlers));
    expect(result).toEqual({ eventType: "customer.created", handled: false, inserted: 0, updated: 0, deleted: 0 });
    expect(await row(keyOf(skipped))).toEqual(before);
    expect(await count(db, "invoices")).toBe(0);
  });

  test("`replayEvent()` of an event ignored before its handler existed runs the new handler and marks the row processed", async () => {
    const skipped = await ignoredRow();
    await db`create table if not exists replay_marks (event_id text primary key)`;
    const later = handlerTable(billingHandlers, {
      "customer.created": async (tx, _object, context) => {
        await tx`insert into replay_marks (event_id) values (${context.eventId}) on conflict do nothing`;
      },
    });
    const result = await onFreshConnection((one) => replayEvent(one, key(skipped), later));
    expect(result).toEqual({ eventType: "customer.created", handled: true, inserted: 1, updated: 0, deleted: 0 });
    expect(await db`select outcome from webhook_inbox where event_id = ${skipped.eventId}`).toEqual([{ outcome: "processed" }] as never);
    expect(await count(db, "replay_marks")).toBe(1);
  });
});

describe("purge()", () => {
  /**
   * Processed rows 40, 5 and 2 days old (and an ignored one 40 days old), plus an unprocessed and a
   * needs-review row received 40 days ago.
   */
  async function seed() {
    const oldReview = await needsReviewRow(new PermanentError("Cannot apply invoice event: missing or invalid field(s) customer"));
    const oldWaiting = await unprocessedRow();
    const old1 = await processedRow();
    const old2 = await processedRow("invoice.created");
    const oldIgnored = await ignoredRow();
    const mid = await processedRow();
    const recent = await processedRow();
    for (const e of [oldReview, oldWaiting, old1, old2, oldIgnored]) await backdate(e.eventId, 40 * DAY_MS);
    await backdate(mid.eventId, 5 * DAY_MS);
    await backdate(recent.eventId, 2 * DAY_MS);
    return { oldReview, oldWaiting, old1, old2, oldIgnored, mid, recent };
  }

  const remaining = async () => Object.keys(await rows()).sort();
  const keys = (...list: Sent[]) => list.map((e) => keyOf(e)).sort();

  test("`purge()` refuses a retention below 31 days (the 30 days backfill re-reads, plus a margin) with RetentionTooShortError, and deletes nothing", async () => {
    const s = await seed();
    const before = await rows();
    const error = await purge(db, { olderThanMs: parseDuration("1d") }).catch((err: unknown) => err);
    expect(error).toBeInstanceOf(RetentionTooShortError);
    expect((error as Error).message).toContain("shorter than the 31 d in which an event may be met again");
    expect((error as Error).message).toContain("retention of 1 d");
    expect(((await purge(db, { olderThanMs: parseDuration("30d") }).catch((err: unknown) => err)) as Error).message).toContain(
      "retention of 30 d is shorter",
    );
    expect(((await purge(db, { olderThanMs: 5_000 }).catch((err: unknown) => err)) as Error).message).toContain(
      "retention of 5 s is shorter",
    );
    expect(await rows()).toEqual(before);
    expect(Object.keys(before).length).toBe(Object.keys(s).length);
  });

  test("`purge()` dry run of a 1-day retention needs no `force`: it counts, changes nothing and says the real run needs it", async () => {
    await seed();
    const before = await rows();
    expect(await purge(db, { olderThanMs: parseDuration("1d"), dryRun: true })).toEqual({
      dryRun: true,
      deleted: 5,
      payloadsDropped: 0,
      outboxDeleted: 0,
      claimsDeleted: 0,
      backfillRequestsDeleted: 0,
      partitionsDropped: expect.any(Array),
      openRowsMoved: expect.any(Number),
      forceRequired:
        "a retention of 1 d is shorter than the 31 d in which an event may be met again (Stripe redelivers for 3 d, event backfill re-reads 30 d, plus a 1 d margin); an event met after its row is gone would be applied again",
    });
    expect(await purge(db, { olderThanMs: parseDuration("1d"), dryRun: true, force: true })).toEqual({
      dryRun: true,
      deleted: 5,
      payloadsDropped: 0,
      outboxDeleted: 0,
      claimsDeleted: 0,
      backfillRequestsDeleted: 0,
      partitionsDropped: expect.any(Array),
      openRowsMoved: expect.any(Number),
    });
    expect(await rows()).toEqual(before);
  });

  test("`purge()` with `force: true` accepts a 1-day retention and deletes every processed row older than a day", async () => {
    const s = await seed();
    expect(await purge(db, { olderThanMs: parseDuration("1d"), force: true })).toEqual({
      dryRun: false,
      deleted: 5,
      payloadsDropped: 0,
      outboxDeleted: 0,
      claimsDeleted: 0,
      backfillRequestsDeleted: 0,
      partitionsDropped: expect.any(Array),
      openRowsMoved: expect.any(Number),
    });
    expect(await remaining()).toEqual(keys(s.oldReview, s.oldWaiting));
  });

  test("`purge()` at the default 31 d deletes only the settled rows whose events are older than 31 days", async () => {
    const s = await seed();
    expect(await purge(db, { olderThanMs: parseDuration("31d") })).toEqual({
      dryRun: false,
      deleted: 3,
      payloadsDropped: 0,
      outboxDeleted: 0,
      claimsDeleted: 0,
      backfillRequestsDeleted: 0,
      partitionsDropped: expect.any(Array),
      openRowsMoved: expect.any(Number),
    });
    expect(await remaining()).toEqual(keys(s.oldReview, s.oldWaiting, s.mid, s.recent));
    expect(await row(keyOf(s.mid))).toMatchObject({ state: "processed", payload_dropped_at: null });
    expect(await row(keyOf(s.recent))).toMatchObject({ state: "processed", payload_dropped_at: null });
  });

  test("`purge()` never deletes unprocessed or needs-review rows, however old", async () => {
    const s = await seed();
    const before = await rows();
    expect(await purge(db, { olderThanMs: 1, payloadsOlderThanMs: 1, force: true })).toEqual({
      dryRun: false,
      deleted: 5,
      payloadsDropped: 0,
      outboxDeleted: 0,
      claimsDeleted: 0,
      backfillRequestsDeleted: 0,
      partitionsDropped: expect.any(Array),
      openRowsMoved: expect.any(Number),
    });
    const after = await rows();
    expect(Object.keys(after).sort()).toEqual(keys(s.oldReview, s.oldWaiting));
    expect(after[keyOf(s.oldReview)]).toEqual(before[keyOf(s.oldReview)] as StateRow);
    expect(after[keyOf(s.oldWaiting)]).toEqual(before[keyOf(s.oldWaiting)] as StateRow);
    expect(after[keyOf(s.oldReview)]?.payload).toEqual(JSON.parse(s.oldReview.body));
  });

  test("`purge()` in batches of 2 deletes all 5 old rows", async () => {
    const old: Sent[] = [];
    for (let i = 0; i < 5; i++) old.push(await processedRow());
    const recent = await processedRow();
    for (const e of old) await backdate(e.eventId, 40 * DAY_MS);
    await backdate(recent.eventId, 0); // created now (the fixture's `created` is a fixed date)
    expect(await purge(db, { olderThanMs: 31 * DAY_MS, batchSize: 2 })).toEqual({
      dryRun: false,
      deleted: 5,
      payloadsDropped: 0,
      outboxDeleted: 0,
      claimsDeleted: 0,
      backfillRequestsDeleted: 0,
      partitionsDropped: expect.any(Array),
      openRowsMoved: expect.any(Number),
    });
    expect(await remaining()).toEqual(keys(recent));
  });

  test("`purge()` in batches drops the payloads of all old rows too", async () => {
    const old: Sent[] = [];
    for (let i = 0; i < 5; i++) old.push(await processedRow());
    for (const e of old) await backdate(e.eventId, 10 * DAY_MS);
    expect(await purge(db, { olderThanMs: 31 * DAY_MS, payloadsOlderThanMs: 7 * DAY_MS, batchSize: 2 })).toEqual({
      dryRun: false,
      deleted: 0,
      payloadsDropped: 5,
      outboxDeleted: 0,
      claimsDeleted: 0,
      backfillRequestsDeleted: 0,
      partitionsDropped: expect.any(Array),
      openRowsMoved: expect.any(Number),
    });
    expect(await count(db, "webhook_inbox", "payload is null and payload_dropped_at is not null")).toBe(5);
  });

  test("`purge()` dry run counts what it would delete and drop without changing a row, and the real run matches it", async () => {
    await seed();
    const before = await rows();
    const options = { olderThanMs: 31 * DAY_MS, payloadsOlderThanMs: 3 * DAY_MS };
    expect(await purge(db, { ...options, dryRun: true })).toEqual({
      dryRun: true,
      deleted: 3,
      payloadsDropped: 1,
      outboxDeleted: 0,
      claimsDeleted: 0,
      backfillRequestsDeleted: 0,
      partitionsDropped: expect.any(Array),
      openRowsMoved: expect.any(Number),
    });
    expect(await purge(db, { olderThanMs: 31 * DAY_MS, dryRun: true })).toEqual({
      dryRun: true,
      deleted: 3,
      payloadsDropped: 0,
      outboxDeleted: 0,
      claimsDeleted: 0,
      backfillRequestsDeleted: 0,
      partitionsDropped: expect.any(Array),
      openRowsMoved: expect.any(Number),
    });
    expect(await rows()).toEqual(before);
    expect(await purge(db, options)).toEqual({
      dryRun: false,
      deleted: 3,
      payloadsDropped: 1,
      outboxDeleted: 0,
      claimsDeleted: 0,
      backfillRequestsDeleted: 0,
      partitionsDropped: expect.any(Array),
      openRowsMoved: expect.any(Number),
    });
  });

  test("`purge()` with `payloadsOlderThanMs` drops the payloads of old processed rows only, keeping key and metadata", async () => {
    const s = await seed();
    const before = await rows();
    expect(await purge(db, { olderThanMs: 31 * DAY_MS, payloadsOlderThanMs: 3 * DAY_MS })).toEqual({
      dryRun: false,
      deleted: 3,
      payloadsDropped: 1,
      outboxDeleted: 0,
      claimsDeleted: 0,
      backfillRequestsDeleted: 0,
      partitionsDropped: expect.any(Array),
      openRowsMoved: expect.any(Number),
    });
    const after = await rows();
    const mid = after[keyOf(s.mid)];
    expect(mid?.payload).toBeNull();
    expect(mid?.payload_dropped_at).toBeInstanceOf(Date);
    const { payload: _a, payload_dropped_at: _b, ...kept } = before[keyOf(s.mid)] as StateRow;
    expect(mid).toMatchObject(kept);
    for (const e of [s.recent, s.oldWaiting, s.oldReview]) {
      expect(after[keyOf(e)]).toEqual(before[keyOf(e)] as StateRow);
      expect(after[keyOf(e)]?.payload).toEqual(JSON.parse(e.body));
    }
    const [shown] = await showEvent(db, s.mid.eventId, true);
    expect(shown).toMatchObject({ state: "processed", payloadDropped: true, payload: null });
  });

  test("a redelivery of an event whose payload `purge()` dropped is still a duplicate and books nothing", async () => {
    const s = await seed();
    await purge(db, { olderThanMs: 31 * DAY_MS, payloadsOlderThanMs: 3 * DAY_MS });
    expect((await row(keyOf(s.mid))).payload).toBeNull();
    const ledger = await count(db, "ledger_entries");
    const outbox = await count(db, "outbox");
    // A redelivery carries the event's own `created`, which the backdated row holds (the key includes it: sql/0026).
    const [stored] = await db<{ created: string }[]>`select extract(epoch from event_created_at)::bigint as created from webhook_inbox where event_id = ${s.mid.eventId}`;
    const redelivered = JSON.stringify({ ...JSON.parse(s.mid.body), created: Number(stored?.created) });
    expect(await receiveSync(db, BILLING, verified(redelivered))).toBe("duplicate");
    expect(await receiveAsync(db, BILLING, verified(redelivered))).toBe("duplicate");
    expect(await count(db, "ledger_entries")).toBe(ledger);
    expect(await count(db, "outbox")).toBe(outbox);
    expect(await row(keyOf(s.mid))).toMatchObject({ state: "processed", payload: null });
  });
});

describe("parseDuration()", () => {
  test("`parseDuration()` reads 30d, 12h, 90m, 45s and 500ms as milliseconds", () => {
    expect(parseDuration("30d")).toBe(30 * DAY_MS);
    expect(parseDuration("12h")).toBe(12 * 3_600_000);
    expect(parseDuration("90m")).toBe(90 * MINUTE_MS);
    expect(parseDuration("45s")).toBe(45_000);
    expect(parseDuration("500ms")).toBe(500);
  });

  test("`parseDuration()` rejects an empty text, a bare number, a fraction, a negative and an unknown unit, naming the value", () => {
    for (const text of ["", "30", "1.5d", "-1d", "30x"]) {
      expect(() => parseDuration(text)).toThrow(`Cannot read duration "${text}"`);
    }
  });

  test("`parseDuration()` rejects a duration longer than 100 years (PostgreSQL could not subtract it from now())", () => {
    expect(parseDuration("36500d")).toBe(36_500 * DAY_MS);
    for (const text of ["36501d", "99999999d"])
      expect(() => parseDuration(text)).toThrow(`Cannot read duration "${text}": longer than 100 years`);
  });

  test("`parseDuration()` rejects a zero duration (its contract: a positive whole number)", () => {
    for (const text of ["0d", "0ms"]) {
      expect(() => parseDuration(text)).toThrow(`Cannot read duration "${text}"`);
    }
  });
});
