// The operator functions of src/ops/ against real PostgreSQL: status, list, show, requeue, replay,
// purge and parseDuration. Rows get their states through the real code paths (receiveSync,
// receiveAsync, claimBatch + processClaim); only their arrival is moved back, with backdateInbox
// (a state row and its payload row together: sql/0027).
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
import { insertInbox, rawOnlyRow } from "../../src/inbox/inbox.ts";
import { backdateInbox, count, eventBody, freshDatabase, invoice, verified } from "../support/helpers.ts";
import { waitUntil } from "../support/wait-until.ts";

const fresh = await freshDatabase();
const db = fresh.db;
afterAll(() => fresh.drop());
beforeEach(async () => {
  await db`truncate webhook_inbox, webhook_inbox_payloads, outbox, ledger_entries, invoices`;
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
  /** The payload row's payload (sql/0027), null once retention dropped it. */
  payload: Record<string, unknown> | null;
  /** No payload row: retention dropped it. */
  payload_dropped: boolean;
}

const keyOf = (e: Sent, endpoint = "billing") => `${endpoint}/${e.eventId}`;

/** Every inbox row with its payload row (found by key and received_at: sql/0027), keyed `endpoint/event_id`. */
async function rows(): Promise<Record<string, StateRow>> {
  const all = await db<(StateRow & { endpoint: string; event_id: string })[]>`
    select s.endpoint, s.event_id, s.state, s.event_type, s.attempts, s.received_at, s.available_at, s.processed_at,
           s.needs_review_at, s.last_error, s.outcome, s.available_at <= now() as due, p.payload,
           p.received_at is null as payload_dropped
      from webhook_inbox_state s
      left join webhook_inbox_payloads p using (provider, endpoint, event_id, received_at)
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
    await backdateInbox(db, oldest.eventId, 2 * 3_600_000);
    await backdateInbox(db, paymentsWaiting.eventId, 10 * MINUTE_MS);
    await backdateInbox(db, parkedLongAgo.eventId, 5 * 3_600_000); // parked rows do not make the unprocessed age

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
    await backdateInbox(db, oldWaiting.eventId, 2 * 3_600_000);
    await backdateInbox(db, oldDone.eventId, 2 * 3_600_000);

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
    for (const [i, e] of newestFirst.entries()) await backdateInbox(db, e.eventId, (i + 1) * MINUTE_MS);
    return { quota, quotaLike, rateLimit, rateDash, waiting, waitingPayments, done, skipped, newestFirst };
  }

  test("`listEvents()` returns rows newest first with their metadata, never a payload field", async () => {
    const s = await seed();
    const list = await listEvents(db, {});
    expect(ids(list)).toEqual(ids(s.newestFirst));
    const summaryKeys = [
      "account",
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
    // Kept as the receiver keeps it: a state row parked at once and a payload row with only the raw body.
    const key = { provider: "stripe", endpoint: "billing", eventId: "evt_ops_raw" };
    const inserted = await insertInbox(db, [rawOnlyRow(key, verified(raw), "PostgresError: unsupported Unicode escape sequence", BACKOFF)]);
    expect(inserted.size).toBe(1);
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
    // 15 days back: its weekly payload partition (or, once an earlier purge dropped that week, the
    // default partition) lies wholly past a 7-day horizon whatever the weekday.
    await backdateInbox(db, old.eventId, 15 * DAY_MS);
    expect(await purge(db, { olderThanMs: 31 * DAY_MS, payloadsOlderThanMs: 7 * DAY_MS })).toEqual({
      dryRun: false,
      deleted: 0,
      keyRetention: [{ provider: "stripe", olderThanMs: 31 * DAY_MS }],
      payloadsDropped: 1,
      outboxDeleted: 0,
      claimsDeleted: 0,
      backfillRequestsDeleted: 0,
      partitionsDropped: expect.any(Array),
      openPayloadsMoved: 0, // the parked and the waiting row arrived this week: their payloads stay where they are
    });
    expect(await row(keyOf(old))).toMatchObject({ state: "processed", payload: null, payload_dropped: true });

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
   * Processed rows received 40, 12 and 2 days ago (and an ignored one 40 days ago), plus an unprocessed
   * and a needs-review row received 40 days ago. The ages keep clear of week boundaries: a payload is
   * dropped with its whole weekly partition (sql/0027), so one received A days ago surely goes at a
   * horizon of H days when A ≥ H + 7 and surely stays when A < H (40 and 12 d against 3 d, 40 against 31).
   */
  async function seed() {
    const oldReview = await needsReviewRow(new PermanentError("Cannot apply invoice event: missing or invalid field(s) customer"));
    const oldWaiting = await unprocessedRow();
    const old1 = await processedRow();
    const old2 = await processedRow("invoice.created");
    const oldIgnored = await ignoredRow();
    const mid = await processedRow();
    const recent = await processedRow();
    await backdateInbox(
      db,
      [oldReview, oldWaiting, old1, old2, oldIgnored].map((e) => e.eventId),
      40 * DAY_MS,
    );
    await backdateInbox(db, mid.eventId, 12 * DAY_MS);
    await backdateInbox(db, recent.eventId, 2 * DAY_MS);
    return { oldReview, oldWaiting, old1, old2, oldIgnored, mid, recent };
  }

  /** What every purge of these tests returns besides its counts: only Stripe rows, so one key retention. */
  const result = (keyMs: number, counts: { dryRun: boolean; deleted: number; payloadsDropped: number }) => ({
    ...counts,
    keyRetention: [{ provider: "stripe", olderThanMs: keyMs }],
    outboxDeleted: 0,
    claimsDeleted: 0,
    backfillRequestsDeleted: 0,
    partitionsDropped: expect.any(Array),
    // 2 when the 40-day-old week still had its partition, 0 when an earlier test's purge had dropped it
    // (its payloads then land in the default partition): where they end up is checked by `expectKeptOpen`.
    openPayloadsMoved: expect.any(Number),
  });

  /** The unsettled rows' payloads survived, whole, in the default partition (moved there when their week was dropped). */
  async function expectKeptOpen(...open: Sent[]) {
    const all = await rows();
    for (const e of open) expect(all[keyOf(e)]).toMatchObject({ payload: JSON.parse(e.body), payload_dropped: false });
    const where = await db<{ event_id: string; p: string }[]>`
      select event_id, tableoid::regclass::text as p from webhook_inbox_payloads where event_id = any(${open.map((e) => e.eventId)}::text[])
    `;
    expect(where.map((r) => r.p)).toEqual(open.map(() => "webhook_inbox_payloads_default"));
  }

  const remaining = async () => Object.keys(await rows()).sort();
  const keys = (...list: Sent[]) => list.map((e) => keyOf(e)).sort();
  const FLOOR =
    "a key retention of 1 d is shorter than stripe's 31 d (it may send an event again for 30 d, plus a 1 d margin); an event met after its key is gone would be applied again";

  test("`purge()` refuses a key retention below Stripe's 31 days (its 30 days of events, plus a margin) with RetentionTooShortError, and deletes nothing", async () => {
    const s = await seed();
    const before = await rows();
    const error = await purge(db, { olderThanMs: parseDuration("1d") }).catch((err: unknown) => err);
    expect(error).toBeInstanceOf(RetentionTooShortError);
    expect((error as Error).message).toBe(`Cannot purge: ${FLOOR}. Use --force to override.`);
    expect(((await purge(db, { olderThanMs: parseDuration("30d") }).catch((err: unknown) => err)) as Error).message).toContain(
      "a key retention of 30 d is shorter than stripe's 31 d",
    );
    expect(((await purge(db, { olderThanMs: 5_000 }).catch((err: unknown) => err)) as Error).message).toContain(
      "a key retention of 5 s is shorter than stripe's 31 d",
    );
    expect(await rows()).toEqual(before);
    expect(Object.keys(before).length).toBe(Object.keys(s).length);
    expect(await count(db, "webhook_inbox_payloads")).toBe(Object.keys(s).length);
  });

  test("`purge()` dry run of a 1-day retention needs no `force`: it counts, changes nothing and says the real run needs it", async () => {
    const s = await seed();
    const before = await rows();
    // Keys: the 5 settled rows received over a day ago. Payloads (default horizon 31 d): the 3 settled 40-day-old ones.
    expect(await purge(db, { olderThanMs: parseDuration("1d"), dryRun: true })).toEqual({
      ...result(DAY_MS, { dryRun: true, deleted: 5, payloadsDropped: 3 }),
      forceRequired: FLOOR,
    });
    expect(await purge(db, { olderThanMs: parseDuration("1d"), dryRun: true, force: true })).toEqual(
      result(DAY_MS, { dryRun: true, deleted: 5, payloadsDropped: 3 }),
    );
    expect(await rows()).toEqual(before);
    expect(await count(db, "webhook_inbox_payloads")).toBe(Object.keys(s).length);
  });

  test("`purge()` with `force: true` accepts a 1-day retention and deletes every settled row received more than a day ago", async () => {
    const s = await seed();
    expect(await purge(db, { olderThanMs: parseDuration("1d"), force: true })).toEqual(
      result(DAY_MS, { dryRun: false, deleted: 5, payloadsDropped: 3 }),
    );
    expect(await remaining()).toEqual(keys(s.oldReview, s.oldWaiting));
    await expectKeptOpen(s.oldReview, s.oldWaiting);
    // The 12- and 2-day-old payloads of the deleted keys wait for their weeks' partitions to pass the horizon.
    expect(await count(db, "webhook_inbox_payloads")).toBe(4);
  });

  test("`purge()` at the default retention deletes only the settled rows received more than 31 days ago", async () => {
    const s = await seed();
    expect(await purge(db, {})).toEqual(result(31 * DAY_MS, { dryRun: false, deleted: 3, payloadsDropped: 3 }));
    expect(await remaining()).toEqual(keys(s.oldReview, s.oldWaiting, s.mid, s.recent));
    expect(await row(keyOf(s.mid))).toMatchObject({ state: "processed", payload_dropped: false, payload: JSON.parse(s.mid.body) });
    expect(await row(keyOf(s.recent))).toMatchObject({ state: "processed", payload_dropped: false, payload: JSON.parse(s.recent.body) });
    await expectKeptOpen(s.oldReview, s.oldWaiting);
  });

  test("`purge()` never deletes unprocessed or needs-review rows or their payloads, however old", async () => {
    const s = await seed();
    const before = await rows();
    // Keys at 1 ms (forced) and payloads at 3 d: every settled key goes, and the payloads of all but the 2-day-old row.
    expect(await purge(db, { olderThanMs: 1, payloadsOlderThanMs: 3 * DAY_MS, force: true })).toEqual(
      result(1, { dryRun: false, deleted: 5, payloadsDropped: 4 }),
    );
    const after = await rows();
    expect(Object.keys(after).sort()).toEqual(keys(s.oldReview, s.oldWaiting));
    expect(after[keyOf(s.oldReview)]).toEqual(before[keyOf(s.oldReview)] as StateRow);
    expect(after[keyOf(s.oldWaiting)]).toEqual(before[keyOf(s.oldWaiting)] as StateRow);
    await expectKeptOpen(s.oldReview, s.oldWaiting);
  });

  test("`purge()` in batches of 2 deletes all 5 old rows", async () => {
    const old: Sent[] = [];
    for (let i = 0; i < 5; i++) old.push(await processedRow());
    const recent = await processedRow(); // received now
    await backdateInbox(db, ids(old), 40 * DAY_MS);
    expect(await purge(db, { olderThanMs: 31 * DAY_MS, batchSize: 2 })).toEqual({
      ...result(31 * DAY_MS, { dryRun: false, deleted: 5, payloadsDropped: 5 }),
      openPayloadsMoved: 0,
    });
    expect(await remaining()).toEqual(keys(recent));
    expect(await count(db, "webhook_inbox_payloads")).toBe(1);
  });

  test("`purge()` in batches drops the payloads of all old rows too", async () => {
    const old: Sent[] = [];
    for (let i = 0; i < 5; i++) old.push(await processedRow());
    await backdateInbox(db, ids(old), 15 * DAY_MS); // a week past the 7-day horizon: its whole week is past it
    expect(await purge(db, { olderThanMs: 31 * DAY_MS, payloadsOlderThanMs: 7 * DAY_MS, batchSize: 2 })).toEqual({
      ...result(31 * DAY_MS, { dryRun: false, deleted: 0, payloadsDropped: 5 }),
      openPayloadsMoved: 0,
    });
    const after = await rows();
    expect(Object.keys(after).sort()).toEqual(old.map((e) => keyOf(e)).sort());
    for (const r of Object.values(after)) expect(r).toMatchObject({ state: "processed", payload: null, payload_dropped: true });
    expect(await count(db, "webhook_inbox_payloads")).toBe(0);
  });

  test("`purge()` dry run counts what it would delete and drop without changing a row, and the real run matches it", async () => {
    const s = await seed();
    const before = await rows();
    const options = { olderThanMs: 31 * DAY_MS, payloadsOlderThanMs: 3 * DAY_MS };
    // Payloads past 3 d: the 3 settled 40-day-old ones and the 12-day-old one; the unsettled ones are kept.
    expect(await purge(db, { ...options, dryRun: true })).toEqual(result(31 * DAY_MS, { dryRun: true, deleted: 3, payloadsDropped: 4 }));
    expect(await purge(db, { olderThanMs: 31 * DAY_MS, dryRun: true })).toEqual(
      result(31 * DAY_MS, { dryRun: true, deleted: 3, payloadsDropped: 3 }),
    );
    expect(await rows()).toEqual(before);
    expect(await count(db, "webhook_inbox_payloads")).toBe(Object.keys(s).length);
    expect(await purge(db, options)).toEqual(result(31 * DAY_MS, { dryRun: false, deleted: 3, payloadsDropped: 4 }));
    expect(await count(db, "webhook_inbox_payloads")).toBe(3);
  });

  test("`purge()` with `payloadsOlderThanMs` drops the payloads of old settled rows only, keeping key and metadata", async () => {
    const s = await seed();
    const before = await rows();
    expect(await purge(db, { olderThanMs: 31 * DAY_MS, payloadsOlderThanMs: 3 * DAY_MS })).toEqual(
      result(31 * DAY_MS, { dryRun: false, deleted: 3, payloadsDropped: 4 }),
    );
    const after = await rows();
    const mid = after[keyOf(s.mid)];
    expect(mid?.payload).toBeNull();
    expect(mid?.payload_dropped).toBe(true);
    const { payload: _a, payload_dropped: _b, ...kept } = before[keyOf(s.mid)] as StateRow;
    expect(before[keyOf(s.mid)]?.payload_dropped).toBe(false);
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
    expect(await row(keyOf(s.mid))).toMatchObject({ payload: null, payload_dropped: true });
    const ledger = await count(db, "ledger_entries");
    const outbox = await count(db, "outbox");
    // The key is (provider, endpoint, event_id) alone (sql/0027): the redelivered bytes meet the kept key.
    expect(await receiveSync(db, BILLING, verified(s.mid.body))).toBe("duplicate");
    expect(await receiveAsync(db, BILLING, verified(s.mid.body))).toBe("duplicate");
    expect(await count(db, "ledger_entries")).toBe(ledger);
    expect(await count(db, "outbox")).toBe(outbox);
    expect(await row(keyOf(s.mid))).toMatchObject({ state: "processed", payload: null, payload_dropped: true });
    expect(await count(db, "webhook_inbox_payloads", `event_id = '${s.mid.eventId}'`)).toBe(0);
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
