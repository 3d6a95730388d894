// The seed's §2 failure modes (Case A: record first → lost event; Case B: apply first → double
// processing) reproduced with deliberately broken receivers, each next to receiveSync under the
// same fault. Case B and its receiveSync twin use a real process crash: a child `bun` process is
// SIGKILLed at the dangerous point.
import { afterAll, beforeAll, expect, test } from "bun:test";
import type { Db } from "../../src/db/db.ts";
import type { HandlerTable } from "../../src/handlers/handler-table.ts";
import { billingHandlers } from "../../src/handlers/billing.ts";
import { receiveSync, type Outcome, type ReceiveTarget } from "../../src/receiver/receive.ts";
import { receiveApplyFirst, receiveRecordFirst, receiptHandlers, requireHandler } from "./broken-receivers.ts";
import { killAllChildren, killChild, spawnChild, waitForLine } from "../support/child-process.ts";
import { closeAll, connections, count, eventBody, freshDatabase, invoice, verified } from "../support/helpers.ts";
import { waitUntil } from "../support/wait-until.ts";

let fresh: Awaited<ReturnType<typeof freshDatabase>>;
let db: Db;

beforeAll(async () => {
  fresh = await freshDatabase();
  db = fresh.db;
});

afterAll(async () => {
  await killAllChildren();
  await fresh?.drop();
});

const target = (handlers: HandlerTable): ReceiveTarget => ({ provider: "stripe", endpoint: "billing", handlers });

/** Bun's default 5 s per test is too tight for spawning a child and the bounded waits (≤ 15 s); a bound, not a speed assertion. */
const CONCURRENT_TEST_TIMEOUT_MS = 30_000;

/** One invoice.paid event (2000 paid) for `invoiceId`, as a verified event. */
function paidEvent(eventId: string, invoiceId: string) {
  return verified(eventBody(eventId, "invoice.paid", invoice({ id: invoiceId, status: "paid", amount_paid: 2000 })));
}

/** The billing table whose invoice.paid applies the real handler, then fails with a real database error on its first call only. */
function failingOnce(): HandlerTable {
  const paid = requireHandler(billingHandlers, "invoice.paid");
  let calls = 0;
  return {
    ...billingHandlers,
    "invoice.paid": async (tx, object, context) => {
      await paid(tx, object, context);
      if (++calls === 1) await tx`select 1 / 0`;
    },
  };
}

/** What is left of one invoice: inbox rows of `eventId`, ledger rows, receipt and booking outbox rows, invoice status. */
async function leftovers(eventId: string, invoiceId: string) {
  const [invoiceRow] = await db`select status from invoices where id = ${invoiceId}`;
  return {
    inbox: await count(db, "webhook_inbox", `event_id = '${eventId}'`),
    ledger: await count(db, "ledger_entries", `invoice_id = '${invoiceId}'`),
    receipts: await count(db, "outbox", `aggregate_id = '${invoiceId}' and event_type = 'ReceiptEmailRequested'`),
    bookings: await count(db, "outbox", `aggregate_id = '${invoiceId}' and event_type = 'InvoicePaymentBooked'`),
    status: (invoiceRow?.status as string | undefined) ?? null,
  };
}

/** A promise-based barrier: the n-th caller releases everyone. */
function barrier(n: number): () => Promise<void> {
  let arrived = 0;
  const { promise, resolve } = Promise.withResolvers<void>();
  return async () => {
    if (++arrived === n) resolve();
    await promise;
  };
}

test("`receiveRecordFirst()` (Case A) loses a payment whose first delivery failed: the redelivery answers duplicate", async () => {
  const event = paidEvent("evt_case_a_broken", "in_case_a_broken");
  const handlers = failingOnce();
  await expect(receiveRecordFirst(db, target(handlers), event)).rejects.toThrow(/division by zero/);
  expect(await receiveRecordFirst(db, target(handlers), event)).toBe("duplicate");
  // The inbox says "processed", but nothing was booked, and Stripe will not send it again.
  const [row] = await db`select outcome from webhook_inbox where event_id = 'evt_case_a_broken'`;
  expect(row?.outcome).toBe("processed");
  expect(await leftovers("evt_case_a_broken", "in_case_a_broken")).toEqual({ inbox: 1, ledger: 0, receipts: 0, bookings: 0, status: null });
});

test("`receiveSync()` books the payment when the redelivery follows the same failure", async () => {
  const event = paidEvent("evt_case_a_sync", "in_case_a_sync");
  const handlers = failingOnce();
  await expect(receiveSync(db, target(handlers), event)).rejects.toThrow(/division by zero/);
  expect(await leftovers("evt_case_a_sync", "in_case_a_sync")).toEqual({ inbox: 0, ledger: 0, receipts: 0, bookings: 0, status: null });
  expect(await receiveSync(db, target(handlers), event)).toBe("processed");
  expect(await leftovers("evt_case_a_sync", "in_case_a_sync")).toEqual({ inbox: 1, ledger: 1, receipts: 0, bookings: 1, status: "paid" });
});

test(
  "`receiveApplyFirst()` (Case B) requests two receipts when its process is killed between the two commits",
  async () => {
    const event = paidEvent("evt_case_b_broken", "in_case_b_broken");
    const child = spawnChild("crash-after-commit", fresh.url, event.body);
    expect(await waitForLine(child, "COMMITTED")).toBe("COMMITTED");
    expect(await killChild(child)).toBe("SIGKILL");
    expect(child.stdout).not.toContain("UNREACHABLE");
    // The business change committed; the inbox row that would mark it done was never written.
    expect(await leftovers("evt_case_b_broken", "in_case_b_broken")).toEqual({
      inbox: 0,
      ledger: 1,
      receipts: 1,
      bookings: 1,
      status: "paid",
    });

    expect(await receiveApplyFirst(db, target(receiptHandlers), event)).toBe("processed");
    // Applied twice: a second receipt email. The ledger still shows 1 only because its unique key
    // (invoice_id, kind) absorbs the second booking; a non-idempotent effect is what Case B doubles.
    expect(await leftovers("evt_case_b_broken", "in_case_b_broken")).toEqual({
      inbox: 1,
      ledger: 1,
      receipts: 2,
      bookings: 1,
      status: "paid",
    });
  },
  CONCURRENT_TEST_TIMEOUT_MS,
);

test(
  "`receiveSync()` leaves nothing when its process is killed inside the transaction, and the redelivery requests one receipt",
  async () => {
    const event = paidEvent("evt_case_b_sync", "in_case_b_sync");
    const child = spawnChild("crash-in-transaction", fresh.url, event.body);
    const backend = Number((await waitForLine(child, "IN_TX ")).slice("IN_TX ".length));
    expect(Number.isInteger(backend)).toBe(true);
    // The child's inbox row, invoice, ledger and outbox rows exist, uncommitted, in an open transaction.
    const [activity] = await db`select state from pg_stat_activity where pid = ${backend}`;
    expect(activity?.state).toBe("idle in transaction");
    const [locked] = await db`select count(*)::int as n from pg_locks where pid = ${backend} and relation = 'webhook_inbox'::regclass`;
    expect(locked?.n).toBeGreaterThan(0);

    expect(await killChild(child)).toBe("SIGKILL");
    expect(child.stdout).not.toContain("UNREACHABLE");
    // The server rolls the transaction back when it notices the closed connection.
    await waitUntil(
      `backend ${backend} to end`,
      async () => (await db`select 1 from pg_stat_activity where pid = ${backend}`).length === 0,
    );
    expect(await leftovers("evt_case_b_sync", "in_case_b_sync")).toEqual({ inbox: 0, ledger: 0, receipts: 0, bookings: 0, status: null });

    expect(await receiveSync(db, target(receiptHandlers), event)).toBe("processed");
    expect(await leftovers("evt_case_b_sync", "in_case_b_sync")).toEqual({ inbox: 1, ledger: 1, receipts: 1, bookings: 1, status: "paid" });
    expect(await receiveSync(db, target(receiptHandlers), event)).toBe("duplicate");
    expect((await leftovers("evt_case_b_sync", "in_case_b_sync")).receipts).toBe(1);
  },
  CONCURRENT_TEST_TIMEOUT_MS,
);

test(
  "`receiveApplyFirst()` (Case B) applies twice when two concurrent deliveries both pass its SELECT",
  async () => {
    const event = paidEvent("evt_case_b_race", "in_case_b_race");
    const actors = connections(fresh.url, 2);
    try {
      const bothChecked = barrier(2);
      const outcomes = await Promise.all(
        actors.map((actor) => receiveApplyFirst(actor, target(receiptHandlers), event, { afterCheck: bothChecked })),
      );
      expect(outcomes).toEqual(["processed", "processed"]);
    } finally {
      await closeAll(actors);
    }
    expect(await leftovers("evt_case_b_race", "in_case_b_race")).toEqual({ inbox: 1, ledger: 1, receipts: 2, bookings: 1, status: "paid" });
  },
  CONCURRENT_TEST_TIMEOUT_MS,
);

test(
  "`receiveSync()` applies once when the same two deliveries arrive concurrently",
  async () => {
    const event = paidEvent("evt_case_b_race_sync", "in_case_b_race_sync");
    const actors = connections(fresh.url, 2);
    let outcomes: Outcome[];
    try {
      await Promise.all(actors.map((actor) => actor`select 1`));
      outcomes = await Promise.all(actors.map((actor) => receiveSync(actor, target(receiptHandlers), event)));
    } finally {
      await closeAll(actors);
    }
    expect(outcomes.toSorted()).toEqual(["duplicate", "processed"]);
    expect(await leftovers("evt_case_b_race_sync", "in_case_b_race_sync")).toEqual({
      inbox: 1,
      ledger: 1,
      receipts: 1,
      bookings: 1,
      status: "paid",
    });
  },
  CONCURRENT_TEST_TIMEOUT_MS,
);
