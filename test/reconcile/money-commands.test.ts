// `reconcile refunds` and `reconcile disputes` against real PostgreSQL and the fake Stripe API: the
// money-out fixtures delivered only in part (an outage), Stripe's current objects in the fake; each
// drift found, repaired once through applyRefund / applyDispute, a second run clean and silent.
import { afterAll, beforeEach, describe, expect, test } from "bun:test";
import { connect } from "../../src/db/db.ts";
import { startFakeStripe } from "../../src/dev/fake-stripe/serve.ts";
import { FakeStripeStore, type StoredObject } from "../../src/dev/fake-stripe/store.ts";
import { stripeHandlers } from "../../src/handlers/stripe-money.ts";
import { reconcileDisputesCommand, reconcileRefundsCommand } from "../../src/reconcile/money-commands.ts";
import type { ReconcileIo, Reconciliation } from "../../src/reconcile/reconcile-command.ts";
import { receiveSync, type ReceiveTarget } from "../../src/receiver/receive.ts";
import { eventBody, freshDatabase, verified } from "../support/helpers.ts";
import { moneyOutEvent, truncateMoney } from "../support/money-out.ts";

const KEY = "sk_test_reconcilemoney123";
const fresh = await freshDatabase();
const db = fresh.db;
const store = new FakeStripeStore(KEY);
const fake = startFakeStripe({ store });
const ENV = { STRIPE_API_KEY: KEY, STRIPE_API_BASE: fake.url };
const BILLING: ReceiveTarget = { provider: "stripe", endpoint: "billing", handlers: stripeHandlers };
const SINCE = ["--since", "2025-01-01"]; // the fixtures were created in December 2025
afterAll(async () => {
  await fake.stop();
  await fresh.drop();
});
beforeEach(async () => {
  await truncateMoney(db);
  store.objects.clear();
  store.requests.length = 0;
});

type Command = (args: string[], env: Record<string, string | undefined>, io: ReconcileIo) => Promise<number>;

/** Runs a reconcile command in-process on its own connection; output captured. */
async function run(command: Command, args: string[]) {
  const out: string[] = [];
  const code = await command([...SINCE, ...args], ENV, {
    async openDatabase() {
      const own = connect(fresh.url, { max: 1 });
      return { db: own, close: () => own.end({ timeout: 5 }) };
    },
    out: (l) => out.push(l),
    err: () => {},
    retry: { baseMs: 1, maxMs: 4 },
    pageSize: 2,
  });
  const text = out.join("\n");
  return { code, text, json: () => JSON.parse(text) as Reconciliation };
}

/** Delivers the money-out fixtures with these file prefixes, as webhooks (sync). */
async function deliver(...prefixes: string[]) {
  for (const p of prefixes) await receiveSync(db, BILLING, verified(moneyOutEvent(p).body));
}

/** Stripe's current object: the `data.object` of the fixture with this prefix, put in the fake (`changes` applied). */
function inStripe(resource: string, prefix: string, changes: Record<string, unknown> = {}): StoredObject {
  const object = { ...(JSON.parse(moneyOutEvent(prefix).body) as { data: { object: StoredObject } }).data.object, ...changes };
  store.put(resource, object);
  return object;
}

async function state() {
  return {
    ledger: await db`select kind, amount::int, balance_transaction, source_id, event_id from ledger_entries order by id`,
    refunds: await db`select id, status, balance_transaction from refunds order by id`,
    disputes: await db`select id, status from disputes order by id`,
    inbox:
      await db`select event_id, outcome, source, needs_review_at is not null as parked from webhook_inbox where source = 'reconcile' order by event_id`,
    outbox: await db`select event_type, aggregate_id from outbox order by id`,
  };
}

const REF1 = "re_3SmA1pLgUG5tbmjc0Ref1";
const REF2 = "re_3SmA1pLgUG5tbmjc0Ref2";
const REF3 = "re_3SmA1pLgUG5tbmjc0Ref3";
const DISPUTE = "dp_1SmA2qLgUG5tbmjc0DspB";

describe("reconcile refunds", () => {
  test("`reconcileRefundsCommand()` finds refunds the outage missed, books each once with --repair, and a second run is clean and writes nothing", async () => {
    // Invoice 1 paid and its charge known; only the two refund.created (pending) arrived.
    await deliver("01_", "02_", "03_", "04_", "05_", "06_", "11_");
    inStripe("refunds", "07_"); // Ref1 succeeded
    inStripe("refunds", "09_"); // Ref2 succeeded, never seen
    inStripe("refunds", "12_"); // Ref3 failed
    const found = await run(reconcileRefundsCommand, ["--json"]);
    expect(found.code).toBe(1);
    expect(Object.fromEntries(found.json().drift.map((d) => [d.id, d.drift]))).toEqual({
      [REF1]: "status_behind",
      [REF2]: "missing_locally",
      [REF3]: "status_behind",
    });
    const repaired = await run(reconcileRefundsCommand, ["--repair", "--json"]);
    expect(repaired.json().drift.map((d) => d.repair?.outcome)).toEqual(["repaired", "repaired", "repaired"]);
    const after = await state();
    expect(after.ledger.filter((l) => l.kind === "refund").map((l) => [l.source_id, l.amount, l.event_id])).toEqual([
      // Newest first: Ref3 (nothing to book), Ref2, then Ref1.
      [REF2, 1500, `reconcile:${REF2}:succeeded:txn_3SmA1pLgUG5tbmjc0re2`],
      [REF1, 2500, `reconcile:${REF1}:succeeded:txn_3SmA1pLgUG5tbmjc0re1`],
    ]);
    expect(after.refunds.map((r) => r.status)).toEqual(["succeeded", "succeeded", "failed"]);
    expect(after.outbox.filter((o) => o.event_type === "RefundBooked").length).toBe(2);
    expect(after.inbox.every((r) => r.outcome === "processed" && !r.parked)).toBe(true);

    const again = await run(reconcileRefundsCommand, ["--repair"]);
    expect(again.code).toBe(0);
    expect(again.text).toContain("no drift");
    expect(await state()).toEqual(after);
    // A late webhook for a repaired refund is a duplicate in effect: nothing new is booked.
    await deliver("07_", "08_", "09_", "10_", "12_");
    expect((await state()).ledger).toEqual(after.ledger);
  });

  test("`reconcileRefundsCommand()` parks what handlers cannot repair: a refund whose charge never arrived, an amount that differs, a booked refund Stripe says failed", async () => {
    inStripe("refunds", "07_", {
      id: "re_nocharge1",
      charge: "ch_neverseen1",
      payment_intent: "pi_neverseen1",
      balance_transaction: "txn_nocharge1",
    });
    inStripe("refunds", "07_", { id: "re_amount1", amount: 3000 });
    await deliver("06_"); // records Ref1 (2500, pending)
    await db`update refunds set id = 're_amount1' where id = ${REF1}`;
    inStripe("refunds", "12_", { id: "re_failedbooked1", balance_transaction: null });
    await db`
      insert into ledger_entries (kind, amount, currency, balance_transaction, charge, source_id, event_id)
      values ('refund', 1000, 'usd', 'txn_failedbooked1', 'ch_3SmA1pLgUG5tbmjc0RefA', 're_failedbooked1', 'evt_old')
    `;
    await db`
      insert into refunds (id, charge, amount, currency, status, status_rank, balance_transaction)
      values ('re_failedbooked1', 'ch_3SmA1pLgUG5tbmjc0RefA', 1000, 'usd', 'succeeded', 1, 'txn_failedbooked1')
    `;
    const first = await run(reconcileRefundsCommand, ["--repair", "--json"]);
    const byId = Object.fromEntries(first.json().drift.map((d) => [d.id, d]));
    expect(byId.re_nocharge1).toMatchObject({ drift: "missing_locally", repair: { outcome: "repaired" } });
    expect(byId.re_amount1).toMatchObject({ drift: "amount_differs", repair: { outcome: "needs_review" } });
    expect(byId.re_failedbooked1).toMatchObject({ drift: "booked_but_failed", repair: { outcome: "needs_review" } });
    // Recorded, but not bookable without its charge: the next run parks that, once.
    const second = await run(reconcileRefundsCommand, ["--repair", "--json"]);
    expect(second.json().drift.find((d) => d.id === "re_nocharge1")).toMatchObject({
      drift: "not_booked",
      repair: { outcome: "needs_review", key: "reconcile:re_nocharge1:succeeded:txn_nocharge1:not_booked" },
    });
    const before = await state();
    const third = await run(reconcileRefundsCommand, ["--repair", "--json"]);
    expect(third.code).toBe(1);
    expect(third.json().drift.every((d) => d.repair?.outcome === "duplicate")).toBe(true);
    expect(await state()).toEqual(before);
    expect(before.ledger.filter((l) => l.source_id === "re_nocharge1")).toEqual([]);
    // The missing charge arrives at last (a late webhook, or event backfill) and books the waiting
    // refund; the next run finds it in sync and resolves the row it parked about it.
    const charge = JSON.parse(moneyOutEvent("05_").body) as { data: { object: Record<string, unknown> } };
    const late = { ...charge.data.object, id: "ch_neverseen1", payment_intent: "pi_neverseen1" };
    expect(await receiveSync(db, BILLING, verified(eventBody("evt_charge_at_last", "charge.succeeded", late)))).toBe("processed");
    expect([...(await db`select amount::int from ledger_entries where source_id = 're_nocharge1'`)]).toEqual([{ amount: 2500 }]);
    const fourth = await run(reconcileRefundsCommand, ["--repair", "--json"]);
    expect(fourth.json().drift.some((d) => d.id === "re_nocharge1")).toBe(false);
    expect(fourth.json().cleared).toEqual(["reconcile:re_nocharge1:succeeded:txn_nocharge1:not_booked"]);
    const [row] = await db<{ state: string; resolution_note: string }[]>`
      select state, resolution_note from webhook_inbox_state where event_id = 'reconcile:re_nocharge1:succeeded:txn_nocharge1:not_booked'
    `;
    expect(row?.state).toBe("resolved");
    expect(row?.resolution_note).toContain("now matches Stripe");
    expect((await run(reconcileRefundsCommand, ["--repair", "--json"])).json().cleared).toEqual([]);
  });

  test("`reconcileRefundsCommand()` repairs a refund Stripe says failed after its money left by booking its reversal once", async () => {
    await deliver("01_", "02_", "03_", "04_", "05_", "06_", "07_"); // Ref1 succeeded and booked; its failure never arrived
    inStripe("refunds", "07_", { status: "failed", failure_balance_transaction: "txn_3SmA1pLgUG5tbmjc0re1fail" });
    const found = await run(reconcileRefundsCommand, ["--json"]);
    expect(found.json().drift).toMatchObject([
      { id: REF1, drift: "status_behind", repairable: true, stripe: { failureBalanceTransaction: "txn_3SmA1pLgUG5tbmjc0re1fail" } },
    ]);
    const repaired = await run(reconcileRefundsCommand, ["--repair", "--json"]);
    expect(repaired.json().drift.map((d) => d.repair?.outcome)).toEqual(["repaired"]);
    const after = await state();
    expect(after.ledger.filter((l) => l.source_id === REF1).map((l) => [l.kind, l.amount, l.balance_transaction])).toEqual([
      ["refund", 2500, "txn_3SmA1pLgUG5tbmjc0re1"],
      ["refund_reversal", 2500, "txn_3SmA1pLgUG5tbmjc0re1fail"],
    ]);
    expect(after.outbox.filter((o) => o.event_type === "RefundReversed")).toEqual([{ event_type: "RefundReversed", aggregate_id: REF1 }]);
    const again = await run(reconcileRefundsCommand, ["--repair"]);
    expect(again.code).toBe(0);
    expect(await state()).toEqual(after);
  });

  test("`reconcileRefundsCommand()` --repair and the late refund webhook at the same moment book the refund once", async () => {
    for (let i = 0; i < 4; i++) {
      await truncateMoney(db);
      await deliver("01_", "02_", "03_", "04_", "05_", "06_");
      inStripe("refunds", "07_");
      const hook = connect(fresh.url, { max: 1 });
      try {
        const late = JSON.parse(moneyOutEvent("07_").body) as { data: { object: Record<string, unknown> } };
        await Promise.all([
          receiveSync(hook, BILLING, verified(eventBody(`evt_late_refund_${i}`, "refund.updated", late.data.object))),
          run(reconcileRefundsCommand, ["--repair"]),
        ]);
      } finally {
        await hook.end({ timeout: 5 });
      }
      expect([...(await db`select amount::int from ledger_entries where kind = 'refund'`)]).toEqual([{ amount: 2500 }]);
      expect((await run(reconcileRefundsCommand, [])).code).toBe(0);
    }
  }, 60_000);
});

describe("reconcile disputes", () => {
  test("`reconcileDisputesCommand()` books a dispute the outage missed after its creation, once, and a second run is clean", async () => {
    await deliver("13_", "14_", "15_", "16_", "17_");
    inStripe("disputes", "20_"); // won, withdrawn and reinstated
    const found = await run(reconcileDisputesCommand, ["--json"]);
    expect(found.code).toBe(1);
    expect(found.json().drift).toMatchObject([{ id: DISPUTE, drift: "status_behind", stripe: { status: "won", transactions: 2 } }]);
    const repaired = await run(reconcileDisputesCommand, ["--repair", "--json"]);
    expect(repaired.json().drift[0]?.repair).toMatchObject({ outcome: "repaired", key: `reconcile:${DISPUTE}:won:2` });
    const after = await state();
    expect([...after.disputes]).toEqual([{ id: DISPUTE, status: "won" }]);
    expect(
      after.ledger
        .filter((l) => l.source_id === DISPUTE)
        .map((l) => [l.kind, l.amount])
        .sort(),
    ).toEqual([
      ["dispute_fee", 1500],
      ["dispute_reinstatement", 20000],
      ["dispute_withdrawal", 20000],
    ]);
    const again = await run(reconcileDisputesCommand, ["--repair"]);
    expect(again.code).toBe(0);
    expect(await state()).toEqual(after);
  });

  test("`reconcileDisputesCommand()` repairs a missing reinstatement and parks a final status that differs", async () => {
    await deliver("13_", "14_", "15_", "16_", "17_", "18_", "19_"); // closed won, reinstatement not seen
    inStripe("disputes", "20_");
    const first = await run(reconcileDisputesCommand, ["--repair", "--json"]);
    expect(first.json().drift).toMatchObject([{ drift: "transactions_missing", repair: { outcome: "repaired" } }]);
    expect([...(await db`select amount::int from ledger_entries where kind = 'dispute_reinstatement'`)]).toEqual([{ amount: 20000 }]);
    store.put("disputes", { ...store.get("disputes", DISPUTE)!, status: "lost" });
    const second = await run(reconcileDisputesCommand, ["--repair", "--json"]);
    expect(second.code).toBe(1);
    expect(second.json().drift).toMatchObject([{ drift: "final_status_differs", repair: { outcome: "needs_review" } }]);
    expect([...(await db`select status from disputes`)]).toEqual([{ status: "won" }]);
  });
});
