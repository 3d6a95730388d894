// The worker's batches (src/worker/process-batch.ts, applyEach in src/inbox/apply-event.ts) against real
// PostgreSQL: one event's failure rolls back that event only, a lock wait ends at the batch's bound, the
// grouping of a claim into units, and a shuffled storm drained by 2 workers × 16 slots to the model's end
// state. One connection (or one pool) per concurrent actor. The kill of a worker mid-batch is in
// test/system/worker-crash.test.ts.
import { afterAll, beforeEach, describe, expect, test } from "bun:test";
import { connect, type Db } from "../../src/db/db.ts";
import { billingHandlers } from "../../src/handlers/billing.ts";
import type { HandlerTable } from "../../src/handlers/handler-table.ts";
import { stripeHandlers } from "../../src/handlers/stripe-money.ts";
import { receiveAsync, receiveSync, type ReceiveTarget } from "../../src/receiver/receive.ts";
import { checkStorm, passed } from "../../src/dev/chaos/check.ts";
import { generateStorm } from "../../src/dev/chaos/model.ts";
import { mulberry32, shuffleInPlace } from "../../src/dev/random.ts";
import { claimBatch, type Claim } from "../../src/worker/claim.ts";
import { insertInbox } from "../../src/inbox/inbox.ts";
import { chunkClaims } from "../../src/worker/process-batch.ts";
import { runWorker, type WorkerOptions } from "../../src/worker/worker.ts";
import { closeAll, count, eventBody, freshDatabase, inboxRowFor, invoice, verified } from "../support/helpers.ts";
import { deliverAll } from "../support/delivery.ts";

const fresh = await freshDatabase();
const db = fresh.db;
afterAll(() => fresh.drop());
beforeEach(async () => {
  await db`truncate webhook_inbox, outbox, ledger_entries, invoices, stripe_charges, invoice_payments, refunds, disputes`;
});

const TARGET: ReceiveTarget = { provider: "stripe", endpoint: "billing", handlers: billingHandlers };
const bookPayment = billingHandlers["invoice.paid"]!;

/** Queues an `invoice.paid` of `amount` for invoice `invoiceId` (event `evt_<invoiceId>`) in async mode. */
async function queuePaid(invoiceId: string, amount = 2000): Promise<string> {
  const eventId = `evt_${invoiceId}`;
  const body = eventBody(eventId, "invoice.paid", invoice({ id: invoiceId, amount_paid: amount, status: "paid" }));
  expect(await receiveAsync(db, TARGET, verified(body))).toBe("queued");
  return eventId;
}

async function row(eventId: string) {
  const [r] = await db<{ attempts: number; processed: boolean; due_later: boolean; last_error: string | null }[]>`
    select attempts, processed_at is not null as processed, available_at > now() as due_later, last_error
      from webhook_inbox where event_id = ${eventId}
  `;
  return r;
}

/** Runs one worker (its own pool) until `done()` holds or 20 s pass; returns its log lines. */
async function runUntil(options: Partial<WorkerOptions> & { tables: WorkerOptions["tables"] }, done: () => Promise<boolean>) {
  const pool = connect(fresh.url, { max: (options.concurrency ?? 4) + 1 });
  const controller = new AbortController();
  const lines: Record<string, unknown>[] = [];
  const worker = runWorker({ db: pool, signal: controller.signal, pollMs: 50, listen: false, log: (l) => void lines.push(l), ...options });
  try {
    const deadline = Date.now() + 20_000;
    while (!(await done())) {
      if (Date.now() > deadline) throw new Error(`the worker did not finish: ${JSON.stringify(lines.slice(-5))}`);
      await Bun.sleep(20);
    }
  } finally {
    controller.abort();
    await worker;
    await pool.end({ timeout: 5 });
  }
  return lines;
}

describe("a batch", () => {
  test("one event whose statement PostgreSQL refuses after its handler wrote is rolled back alone: the rest of its batch commits, its failure is recorded in the same transaction", async () => {
    const ids = await Promise.all(["in_iso_a", "in_iso_b", "in_iso_c"].map((id) => queuePaid(id)));
    const tables: Record<string, HandlerTable> = {
      stripe: {
        "invoice.paid": async (tx, object, context) => {
          await bookPayment(tx, object, context); // written, then undone by the savepoint's rollback
          // A statement PostgreSQL refuses (not only a JS throw): the transaction must go on without it.
          if (object.id === "in_iso_b") await tx`do $$ begin raise exception 'ledger is closed for in_iso_b'; end $$`;
        },
      },
    };
    const lines = await runUntil({ tables, concurrency: 1, backoff: { baseMs: 60_000, capMs: 60_000 } }, async () => {
      return (await count(db, "webhook_inbox", "processed_at is not null or last_error is not null")) === 3;
    });
    expect(await row(ids[0]!)).toMatchObject({ attempts: 1, processed: true, last_error: null });
    expect(await row(ids[2]!)).toMatchObject({ attempts: 1, processed: true, last_error: null });
    expect(await row(ids[1]!)).toMatchObject({
      attempts: 1,
      processed: false,
      due_later: true,
      last_error: "PostgresError P0001: ledger is closed for in_iso_b",
    });
    expect((await db`select invoice_id from ledger_entries order by invoice_id`).map((r) => r.invoice_id)).toEqual([
      "in_iso_a",
      "in_iso_c",
    ]);
    expect(await count(db, "invoices", "id = 'in_iso_b'")).toBe(0);
    // All three were in one batch: their log lines share one claim, and b's says failed.
    expect(lines.filter((l) => l.outcome !== undefined).map((l) => [l.event_id, l.outcome])).toEqual([
      [ids[0], "processed"],
      [ids[1], "failed"],
      [ids[2], "processed"],
    ]);
  });

  test("a lock wait ends at the batch's bound: the waiting event fails with statement_timeout, the events after it are released (attempt given back) and applied by the next claim", async () => {
    const created = eventBody("evt_lock_b_created", "invoice.created", invoice({ id: "in_lock_b", status: "draft", amount_paid: 0 }));
    expect(await receiveSync(db, TARGET, verified(created))).toBe("processed"); // the invoice row the test locks
    const ids = await Promise.all(["in_lock_a", "in_lock_b", "in_lock_c"].map((id) => queuePaid(id)));
    const locker = connect(fresh.url, { max: 1 });
    let release = () => {};
    const held = new Promise<void>((resolve) => (release = resolve));
    let locked = false;
    const lock = locker.begin(async (tx) => {
      await tx`select 1 from invoices where id = 'in_lock_b' for update`;
      locked = true;
      await held;
    });
    const timeoutMs = 1_500;
    try {
      while (!locked) await Bun.sleep(10);
      const started = Date.now();
      let aCommittedAt = 0;
      const lines = await runUntil(
        { tables: { stripe: billingHandlers }, concurrency: 1, timeoutMs, leaseMs: 10_000, backoff: { baseMs: 60_000, capMs: 60_000 } },
        async () => {
          if (!aCommittedAt && (await row(ids[0]!))?.processed) aCommittedAt = Date.now();
          // a and c applied, b failed (the invoice.created the test processed first is not one of them)
          const [a, b, c] = [await row(ids[0]!), await row(ids[1]!), await row(ids[2]!)];
          return a?.processed === true && c?.processed === true && b?.last_error != null;
        },
      );
      // The batch held a's commit for the lock wait, but no longer than its bound (plus polling slack).
      aCommittedAt ||= Date.now(); // a and the rest settled between two polls: a committed no later than now
      expect(aCommittedAt - started).toBeGreaterThanOrEqual(timeoutMs * 0.8);
      expect(aCommittedAt - started).toBeLessThan(timeoutMs + 2_000);
      expect(await row(ids[0]!)).toMatchObject({ attempts: 1, processed: true });
      expect(await row(ids[1]!)).toMatchObject({ attempts: 1, processed: false, due_later: true });
      expect((await row(ids[1]!))?.last_error).toContain("statement timeout");
      // c was not started by the first batch: its attempt was given back, then the next claim applied it.
      expect(await row(ids[2]!)).toMatchObject({ attempts: 1, processed: true });
      expect(lines.filter((l) => l.event_id === ids[2]).map((l) => l.outcome)).toEqual(["released", "processed"]);
      expect((await db`select invoice_id from ledger_entries order by invoice_id`).map((r) => r.invoice_id)).toEqual([
        "in_lock_a",
        "in_lock_c",
      ]);
    } finally {
      release();
      await lock;
      await locker.end();
    }
  }, 30_000);
});

test("`claimBatch()` takes every due row never tried, but at most `reads.limit` of those that need an API read and `retried` of those already tried", async () => {
  const rows = [
    ...Array.from({ length: 6 }, (_, i) => inboxRowFor({ provider: "stripe-thin", endpoint: "thin", eventId: `evt_read_${i}` })),
    ...Array.from({ length: 3 }, (_, i) => inboxRowFor({ provider: "stripe", endpoint: "refetch", eventId: `evt_refetch_${i}` })),
    ...Array.from({ length: 4 }, (_, i) => inboxRowFor({ provider: "stripe", endpoint: "billing", eventId: `evt_plain_${i}` })),
    ...Array.from({ length: 3 }, (_, i) => inboxRowFor({ provider: "stripe", endpoint: "billing", eventId: `evt_tried_${i}` })),
  ];
  await insertInbox(db, rows);
  await db`update webhook_inbox set attempts = 1 where event_id like 'evt_tried_%'`;
  const claimed = await claimBatch(db, {
    limit: 100,
    leaseMs: 60_000,
    maxAttempts: 10,
    retried: 1,
    reads: { providers: ["stripe-thin"], endpoints: ["stripe/refetch"], limit: 2 },
  });
  const kind = (c: Claim) => c.eventId.replace(/_\d+$/, "").replace("evt_refetch", "evt_read");
  const counts = Object.fromEntries(["evt_plain", "evt_read", "evt_tried"].map((k) => [k, claimed.filter((c) => kind(c) === k).length]));
  expect(counts).toEqual({ evt_plain: 4, evt_read: 2, evt_tried: 1 });
  // What was not taken is still due, its attempts untouched: 7 rows that need a read, 2 already tried.
  expect(await count(db, "webhook_inbox", "attempts = 0 and available_at <= now()")).toBe(7);
  expect(await count(db, "webhook_inbox", "attempts = 1 and available_at <= now()")).toBe(2);
});

describe("chunkClaims()", () => {
  const claim = (eventId: string, invoiceId: string, attempt = 1, account = ""): Claim => ({
    provider: "stripe",
    endpoint: "billing",
    eventId,
    eventType: "invoice.paid",
    attempt,
    account,
    leaseEndsAt: 0,
    payload: JSON.parse(eventBody(eventId, "invoice.paid", invoice({ id: invoiceId }))) as Record<string, unknown>,
  });

  test("sorts by account and object, keeps one object's events together in claim order, cuts runs of at most `batch`, and puts each retried row in a different unit", () => {
    const claims = [
      claim("e1", "in_b"),
      claim("e2", "in_a"),
      claim("r1", "in_z", 2),
      claim("e3", "in_b"),
      claim("e4", "in_c"),
      claim("e5", "in_a", 1, "acct_1"),
      claim("r2", "in_y", 3),
    ];
    const units = chunkClaims(claims, 3, 2).map((u) => u.map((c) => c.eventId));
    expect(units.length).toBeLessThanOrEqual(3);
    expect(units.flat().sort()).toEqual(["e1", "e2", "e3", "e4", "e5", "r1", "r2"]);
    // Sorted by account, then object: the platform's in_a, in_b, in_b, in_c, then acct_1's in_a.
    expect(units.map((u) => u.filter((id) => id.startsWith("e")))).toEqual([["e2"], ["e1", "e3"], ["e4", "e5"]]);
    expect(units.map((u) => u.filter((id) => id.startsWith("r")).length)).toEqual([1, 1, 0]);
    // An even cut inside in_b's events moves past them while its unit has room.
    const split = [claim("f1", "in_a"), claim("f2", "in_b"), claim("f3", "in_b"), claim("f4", "in_c")];
    expect(chunkClaims(split, 2, 3).map((u) => u.map((c) => c.eventId))).toEqual([["f1", "f2", "f3"], ["f4"]]);
    expect(chunkClaims(claims.slice(0, 2), 4, 32).map((u) => u.length)).toEqual([2]); // few rows: one unit
    expect(chunkClaims([], 4, 32)).toEqual([]);
  });
});

test("a storm of shuffled, duplicated invoice lifecycles (refunds, disputes, poison) drained by 2 workers × 16 slots reaches the model's end state", async () => {
  const storm = generateStorm({ invoices: 48, poison: 2, seed: 34 });
  const bodies = [...storm.events, ...storm.events].map((e) => e.body);
  shuffleInPlace(bodies, mulberry32(34));
  const outcomes = await deliverAll(db, "async", bodies);
  expect(outcomes.filter((o) => o !== "queued" && o !== "duplicate" && o !== "ignored")).toEqual([]);
  const pools = [0, 1].map(() => connect(fresh.url, { max: 17 }));
  const controller = new AbortController();
  const workers = pools.map((pool) =>
    runWorker({
      db: pool,
      tables: { stripe: stripeHandlers },
      signal: controller.signal,
      concurrency: 16,
      pollMs: 20,
      listen: false,
      maxAttempts: 3,
      backoff: { baseMs: 10, capMs: 50 },
      log: () => {},
    }),
  );
  try {
    const deadline = Date.now() + 60_000;
    while ((await count(db, "webhook_inbox", "processed_at is null and needs_review_at is null")) > 0) {
      if (Date.now() > deadline) throw new Error("the storm did not drain in 60 s");
      await Bun.sleep(50);
    }
  } finally {
    controller.abort();
    await Promise.all(workers);
    await closeAll(pools);
  }
  const verdict = await checkStorm(db, storm, "billing", new Set(storm.events.map((e) => e.id)), []);
  expect({ ...verdict, poison: undefined }).toEqual({
    ...verdict,
    poison: undefined,
    lost: [],
    doubleBooked: [],
    wrongState: [],
    unprocessed: 0,
    unexpectedNeedsReview: [],
  });
  expect(passed(verdict)).toBe(true);
  expect(verdict.poison.map((p) => p.parked)).toEqual([true, true]);
}, 90_000);
