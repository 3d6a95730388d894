// Money going out (refunds, disputes) through the public seams: signed requests to createApp in each
// mode, the worker, and receiveSync under fast-check orders, against the money-out fixtures.
import { afterAll, beforeEach, describe, expect, test } from "bun:test";
import fc from "fast-check";
import { receiveSync, type Mode, type ReceiveTarget } from "../../src/receiver/receive.ts";
import { stripeHandlers } from "../../src/handlers/stripe-money.ts";
import { eventBody, freshDatabase, verified } from "../support/helpers.ts";
import { deliverAll, drainWithWorkers as drain, shuffledTwice as shuffled } from "../support/delivery.ts";
import { MONEY_OUT_END_STATE, moneyOut, moneyOutEvent, moneyOutState, truncateMoney } from "../support/money-out.ts";

const fresh = await freshDatabase();
const db = fresh.db;
afterAll(() => fresh.drop());
beforeEach(() => truncateMoney(db));

const TARGET: ReceiveTarget = { provider: "stripe", endpoint: "billing", handlers: stripeHandlers };
const WAITS = 60_000;

const deliver = (mode: Mode, bodies: string[]) => deliverAll(db, mode, bodies);
const shuffledTwice = (seed: number) => shuffled(moneyOut(), seed);
const drainWithWorkers = () => drain(db, fresh.url, { stripe: stripeHandlers });

/** A query's rows as a plain array of records (what toEqual compares). */
async function rows(strings: TemplateStringsArray, ...values: never[]): Promise<Record<string, unknown>[]> {
  return [...(await db(strings, ...values))];
}

/** Receives `bodies` one by one with receiveSync; returns the outcomes. */
async function receiveInOrder(bodies: string[]): Promise<string[]> {
  const outcomes: string[] = [];
  for (const body of bodies) outcomes.push(await receiveSync(db, TARGET, verified(body)));
  return outcomes;
}

/** Posts `bodies` signed to a sync-mode app one after the other; returns each outcome. */
async function deliverInOrder(bodies: string[]): Promise<string[]> {
  const outcomes: string[] = [];
  for (const body of bodies) outcomes.push(...(await deliver("sync", [body])));
  return outcomes;
}

describe("money going out", () => {
  test(
    "`createApp()` in sync mode ends in the README's state for the fixtures shuffled, twice, concurrently",
    async () => {
      const outcomes = await deliver("sync", shuffledTwice(1));
      expect(new Set(outcomes)).toEqual(new Set(["processed", "duplicate"]));
      expect(await moneyOutState(db)).toEqual(MONEY_OUT_END_STATE);
    },
    WAITS,
  );

  test(
    "`createApp()` in async mode with `runWorker()` ends in the README's state for the fixtures shuffled, twice, concurrently",
    async () => {
      const outcomes = await deliver("async", shuffledTwice(2));
      expect(new Set(outcomes)).toEqual(new Set(["queued", "duplicate"]));
      await drainWithWorkers();
      expect(await moneyOutState(db)).toEqual(MONEY_OUT_END_STATE);
    },
    WAITS,
  );

  test(
    "`createApp()` in hybrid mode (and the worker for any fallback) ends in the README's state for the fixtures shuffled, twice, concurrently",
    async () => {
      const outcomes = await deliver("hybrid", shuffledTwice(3));
      expect(outcomes.every((o) => ["processed", "duplicate", "queued"].includes(o))).toBe(true);
      await drainWithWorkers();
      expect(await moneyOutState(db)).toEqual(MONEY_OUT_END_STATE);
    },
    WAITS,
  );

  test(
    "`receiveSync()` ends in the README's state for any order of the fixtures with duplicates (property)",
    async () => {
      const events = moneyOut();
      const order = fc
        .tuple(
          fc.shuffledSubarray(
            events.map((_, i) => i),
            { minLength: events.length, maxLength: events.length },
          ),
          fc.array(fc.tuple(fc.nat(events.length - 1), fc.nat(events.length)), { maxLength: 6 }),
        )
        .map(([perm, dups]) => {
          const out = [...perm];
          for (const [index, at] of dups) out.splice(at, 0, index);
          return out;
        });
      await fc.assert(
        fc.asyncProperty(order, async (indexes) => {
          await truncateMoney(db);
          await receiveInOrder(indexes.map((i) => events[i]?.body ?? ""));
          expect(await moneyOutState(db)).toEqual(MONEY_OUT_END_STATE);
        }),
        { numRuns: 15, seed: 12 },
      );
    },
    WAITS,
  );

  test("`receiveSync()` books nothing for a refund that fails, in either order", async () => {
    for (const order of [
      ["11_", "12_"],
      ["12_", "11_"],
    ]) {
      await truncateMoney(db);
      expect(await receiveInOrder(order.map((p) => moneyOutEvent(p).body))).toEqual(["processed", "processed"]);
      expect(await rows`select id, status, balance_transaction from refunds`).toEqual([
        { id: "re_3SmA1pLgUG5tbmjc0Ref3", status: "failed", balance_transaction: null },
      ]);
      expect(await rows`select kind from ledger_entries`).toEqual([]);
      expect(await rows`select event_type from outbox`).toEqual([]);
    }
  });

  test("`receiveSync()` books a pending refund only once it succeeds, whichever arrives first", async () => {
    for (const order of [
      ["05_", "06_", "07_"],
      ["07_", "06_", "05_"],
    ]) {
      await truncateMoney(db);
      await receiveInOrder(order.map((p) => moneyOutEvent(p).body));
      expect(await rows`select status from refunds`).toEqual([{ status: "succeeded" }]);
      expect(await rows`select kind, amount::int, balance_transaction from ledger_entries`).toEqual([
        { kind: "refund", amount: 2500, balance_transaction: "txn_3SmA1pLgUG5tbmjc0re1" },
      ]);
      expect(await rows`select aggregate_id, event_type from outbox`).toEqual([
        { aggregate_id: "re_3SmA1pLgUG5tbmjc0Ref1", event_type: "RefundBooked" },
      ]);
    }
  });

  test("`receiveSync()` books a refund whose money moved once its charge arrives, even after a failed event without a balance transaction", async () => {
    const failed = eventBody("evt_refund_failed_plain", "refund.failed", {
      ...JSON.parse(moneyOutEvent("09_").body).data.object,
      status: "failed",
      balance_transaction: null,
    });
    for (const order of [
      [moneyOutEvent("09_").body, failed, moneyOutEvent("05_").body],
      [moneyOutEvent("05_").body, moneyOutEvent("09_").body, failed],
    ]) {
      await truncateMoney(db);
      expect(await receiveInOrder(order)).toEqual(["processed", "processed", "processed"]);
      expect(await rows`select kind, amount::int, balance_transaction from ledger_entries`).toEqual([
        { kind: "refund", amount: 1500, balance_transaction: "txn_3SmA1pLgUG5tbmjc0re2" },
      ]);
      expect(await rows`select status from refunds`).toEqual([{ status: "failed" }]);
    }
  });

  test("`receiveSync()` books a dispute reinstatement that arrives before its withdrawal, each movement once", async () => {
    await receiveInOrder(["20_", "18_", "17_", "19_"].map((p) => moneyOutEvent(p).body));
    expect(await rows`select kind, amount::int, balance_transaction from ledger_entries order by kind`).toEqual([
      { kind: "dispute_fee", amount: 1500, balance_transaction: "txn_1SmA2qLgUG5tbmjc0DspW" },
      { kind: "dispute_reinstatement", amount: 20000, balance_transaction: "txn_1SmA2qLgUG5tbmjc0DspR" },
      { kind: "dispute_withdrawal", amount: 20000, balance_transaction: "txn_1SmA2qLgUG5tbmjc0DspW" },
    ]);
    expect(await rows`select event_type from outbox order by event_type`).toEqual([
      { event_type: "DisputeFeeBooked" },
      { event_type: "DisputeFundsReinstated" },
      { event_type: "DisputeFundsWithdrawn" },
    ]);
    expect(await rows`select status from disputes`).toEqual([{ status: "won" }]);
  });

  test("`receiveSync()` changes no row when every fixture is delivered again", async () => {
    const bodies = moneyOut().map((e) => e.body);
    await receiveInOrder(bodies);
    const snapshot = async () => ({
      state: await moneyOutState(db),
      ledger: await db`select * from ledger_entries order by id`,
      outbox: await db`select * from outbox order by id`,
      refunds: await db`select * from refunds order by id`,
      disputes: await db`select * from disputes order by id`,
      charges: await db`select * from stripe_charges order by id`,
      payments: await db`select * from invoice_payments order by id`,
    });
    const before = await snapshot();
    expect(await receiveInOrder(bodies)).toEqual(bodies.map(() => "duplicate"));
    expect(await snapshot()).toEqual(before);
  });
});

/** A refund object on the first fixture charge, with `overrides`. */
function refund(overrides: Record<string, unknown>): Record<string, unknown> {
  return {
    id: "re_test_1",
    object: "refund",
    amount: 1000,
    charge: "ch_3SmA1pLgUG5tbmjc0RefA",
    payment_intent: "pi_3SmA1pLgUG5tbmjc0RefA",
    currency: "usd",
    status: "succeeded",
    balance_transaction: "txn_test_1",
    ...overrides,
  };
}

describe("money that does not add up", () => {
  const parked = async () =>
    (await db`select event_id from webhook_inbox where needs_review_at is not null order by event_id`).map((r) => r.event_id as string);

  test("`createApp()` parks a refund that failed after it succeeded but names no failure balance transaction, or was canceled after money moved, and keeps the booked refund", async () => {
    expect(await deliverInOrder([moneyOutEvent("05_").body, moneyOutEvent("07_").body])).toEqual(["processed", "processed"]);
    const late = { id: "re_3SmA1pLgUG5tbmjc0Ref1", amount: 2500, balance_transaction: "txn_3SmA1pLgUG5tbmjc0re1" };
    const failed = eventBody("evt_refund_failed_late", "refund.failed", refund({ ...late, status: "failed" }));
    const canceled = eventBody("evt_refund_canceled_late", "refund.updated", refund({ ...late, status: "canceled" }));
    expect(await deliver("sync", [failed])).toEqual(["needs_review"]);
    expect(await deliver("sync", [canceled])).toEqual(["needs_review"]);
    expect(await parked()).toEqual(["evt_refund_canceled_late", "evt_refund_failed_late"]);
    expect(await rows`select kind, amount::int from ledger_entries`).toEqual([{ kind: "refund", amount: 2500 }]);
    expect(await rows`select status from refunds`).toEqual([{ status: "succeeded" }]);
  });

  test("`createApp()` parks a refund in another currency than its charge, whichever arrives first", async () => {
    const eur = eventBody("evt_refund_eur", "refund.created", refund({ currency: "eur" }));
    expect(await deliver("sync", [moneyOutEvent("05_").body])).toEqual(["processed"]);
    expect(await deliver("sync", [eur])).toEqual(["needs_review"]);
    expect(await parked()).toEqual(["evt_refund_eur"]);
    expect(await rows`select kind from ledger_entries`).toEqual([]);

    await truncateMoney(db);
    expect(await deliver("sync", [eur])).toEqual(["processed"]);
    expect(await deliver("sync", [moneyOutEvent("05_").body])).toEqual(["needs_review"]);
    expect(await parked()).toEqual([moneyOutEvent("05_").id]);
  });

  test("`createApp()` parks a refund that takes the charge's refunds above its amount", async () => {
    const big = eventBody(
      "evt_refund_big",
      "refund.created",
      refund({ id: "re_test_big", amount: 9000, balance_transaction: "txn_test_big" }),
    );
    expect(await deliver("sync", [moneyOutEvent("05_").body, moneyOutEvent("09_").body])).toEqual(["processed", "processed"]);
    expect(await deliver("sync", [big])).toEqual(["needs_review"]);
    expect(await parked()).toEqual(["evt_refund_big"]);
    expect(await rows`select amount::int from ledger_entries where kind = 'refund'`).toEqual([{ amount: 1500 }]);
  });

  test("`createApp()` parks a refund whose balance transaction is already booked with another amount", async () => {
    const other = eventBody(
      "evt_refund_other",
      "refund.updated",
      refund({ id: "re_3SmA1pLgUG5tbmjc0Ref2", amount: 1400, balance_transaction: "txn_3SmA1pLgUG5tbmjc0re2" }),
    );
    expect(await deliverInOrder([moneyOutEvent("05_").body, moneyOutEvent("09_").body])).toEqual(["processed", "processed"]);
    expect(await deliver("sync", [other])).toEqual(["needs_review"]);
    expect(await rows`select amount::int from ledger_entries`).toEqual([{ amount: 1500 }]);
    expect(await rows`select count(*)::int as n from outbox`).toEqual([{ n: 1 }]);
  });

  test("`createApp()` parks a second balance transaction for a refund already booked, keeping one refund row", async () => {
    const again = eventBody(
      "evt_refund_other_txn",
      "refund.updated",
      refund({ id: "re_3SmA1pLgUG5tbmjc0Ref2", amount: 1500, balance_transaction: "txn_V10other" }),
    );
    expect(await deliver("sync", [moneyOutEvent("05_").body, moneyOutEvent("09_").body])).toEqual(["processed", "processed"]);
    expect(await deliver("sync", [again])).toEqual(["needs_review"]);
    expect(await parked()).toEqual(["evt_refund_other_txn"]);
    expect(await rows`select amount::int, balance_transaction from ledger_entries where kind = 'refund'`).toEqual([
      { amount: 1500, balance_transaction: "txn_3SmA1pLgUG5tbmjc0re2" },
    ]);
    expect(await rows`select count(*)::int as n from outbox`).toEqual([{ n: 1 }]);
  });

  test("`createApp()` books a refund whose charge and invoice payment are unknown only once one arrives, and parks an over-refund whichever arrives first", async () => {
    const over = eventBody(
      "evt_refund_over_inv2",
      "refund.created",
      refund({
        id: "re_test_over",
        amount: 25000,
        charge: "ch_3SmA2qLgUG5tbmjc0DspB",
        payment_intent: "pi_3SmA2qLgUG5tbmjc0DspB",
        balance_transaction: "txn_test_over",
      }),
    );
    expect(await deliverInOrder([over])).toEqual(["processed"]);
    expect(await rows`select kind from ledger_entries`).toEqual([]);
    expect(await rows`select event_type from outbox`).toEqual([]);
    expect(await deliverInOrder([moneyOutEvent("15_").body])).toEqual(["needs_review"]);
    expect(await parked()).toEqual([moneyOutEvent("15_").id]);
    expect(await rows`select kind from ledger_entries`).toEqual([]);

    await truncateMoney(db);
    expect(await deliverInOrder([moneyOutEvent("15_").body, over])).toEqual(["processed", "needs_review"]);
    expect(await parked()).toEqual(["evt_refund_over_inv2"]);
    expect(await rows`select kind from ledger_entries`).toEqual([]);
    expect(await rows`select event_type from outbox`).toEqual([]);
  });

  test("`createApp()` parks either the over-refund or its invoice payment when both arrive at once, and books nothing", async () => {
    const over = eventBody(
      "evt_refund_over_race",
      "refund.created",
      refund({
        id: "re_test_race",
        amount: 25000,
        charge: "ch_3SmA2qLgUG5tbmjc0DspB",
        payment_intent: "pi_3SmA2qLgUG5tbmjc0DspB",
        balance_transaction: "txn_test_race",
      }),
    );
    for (let round = 0; round < 5; round++) {
      await truncateMoney(db);
      expect((await deliver("sync", [over, moneyOutEvent("15_").body])).sort()).toEqual(["needs_review", "processed"]);
      expect(await rows`select kind from ledger_entries`).toEqual([]);
      expect(await rows`select event_type from outbox`).toEqual([]);
    }
  });

  test("`createApp()` parks a refund in another currency than its invoice payment when the charge is unknown, whichever arrives first", async () => {
    const eur = eventBody(
      "evt_refund_eur_inv2",
      "refund.created",
      refund({
        id: "re_test_eur",
        amount: 500,
        currency: "eur",
        charge: "ch_3SmA2qLgUG5tbmjc0DspB",
        payment_intent: "pi_3SmA2qLgUG5tbmjc0DspB",
        balance_transaction: "txn_test_eur",
      }),
    );
    expect(await deliverInOrder([moneyOutEvent("15_").body, eur])).toEqual(["processed", "needs_review"]);
    expect(await rows`select kind from ledger_entries`).toEqual([]);
    await truncateMoney(db);
    expect(await deliverInOrder([eur, moneyOutEvent("15_").body])).toEqual(["processed", "needs_review"]);
    expect(await rows`select kind from ledger_entries`).toEqual([]);
  });

  test("`createApp()` books a refund that fits its invoice payment once the payment arrives, with the charge still unknown", async () => {
    const fits = eventBody(
      "evt_refund_fits_inv2",
      "refund.created",
      refund({
        id: "re_test_fits",
        amount: 5000,
        charge: "ch_3SmA2qLgUG5tbmjc0DspB",
        payment_intent: "pi_3SmA2qLgUG5tbmjc0DspB",
        balance_transaction: "txn_test_fits",
      }),
    );
    expect(await deliverInOrder([fits, moneyOutEvent("15_").body])).toEqual(["processed", "processed"]);
    expect(await rows`select kind, amount::int from ledger_entries`).toEqual([{ kind: "refund", amount: 5000 }]);
    expect(await rows`select aggregate_id, event_type from outbox`).toEqual([{ aggregate_id: "re_test_fits", event_type: "RefundBooked" }]);
  });

  test("`createApp()` parks dispute withdrawals above the dispute's amount", async () => {
    const dispute = JSON.parse(moneyOutEvent("18_").body).data.object as Record<string, unknown>;
    const [first] = dispute.balance_transactions as Record<string, unknown>[];
    const second = { ...first, id: "txn_test_second_withdrawal", amount: -20000, fee: 1500, net: -21500 };
    const twice = eventBody("evt_dispute_twice", "charge.dispute.funds_withdrawn", { ...dispute, balance_transactions: [first, second] });
    expect(await deliverInOrder([moneyOutEvent("18_").body, twice])).toEqual(["processed", "needs_review"]);
    expect(await rows`select kind, amount::int from ledger_entries order by kind`).toEqual([
      { kind: "dispute_fee", amount: 1500 },
      { kind: "dispute_withdrawal", amount: 20000 },
    ]);
  });

  test("`createApp()` parks dispute reinstatements above the withdrawals", async () => {
    const dispute = JSON.parse(moneyOutEvent("18_").body).data.object as Record<string, unknown>;
    const [first] = dispute.balance_transactions as Record<string, unknown>[];
    const back = { ...first, id: "txn_test_reinstated_twice", amount: 40000, fee: 0, net: 40000 };
    const tooMuch = eventBody("evt_dispute_reinstated_twice", "charge.dispute.funds_reinstated", {
      ...dispute,
      balance_transactions: [first, back],
    });
    expect(await deliverInOrder([tooMuch])).toEqual(["needs_review"]);
    expect(await rows`select kind from ledger_entries`).toEqual([]);
  });

  test("`createApp()` parks a refund event missing its amount, naming the field", async () => {
    const bad = eventBody("evt_refund_bad", "refund.created", refund({ amount: undefined }));
    expect(await deliver("sync", [bad])).toEqual(["needs_review"]);
    const [row] = await db`select last_error from webhook_inbox where event_id = 'evt_refund_bad'`;
    expect(row?.last_error).toContain("amount");
  });
});
