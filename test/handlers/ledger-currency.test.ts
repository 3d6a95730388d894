// What each ledger row records, against real PostgreSQL through receiveSync and createApp: one basis
// (the presentment amount, what the customer paid and the invoice is in) with the balance
// transaction's settlement figures beside it, and the kinds for money that came back: a refund that
// failed after its money left (refund_reversal), a dispute fee Stripe returned (dispute_fee_reversal).
import { afterAll, beforeEach, describe, expect, test } from "bun:test";
import { createApp } from "../../src/receiver/app.ts";
import { stripeEndpoints } from "../../src/receiver/endpoints.ts";
import { receiveSync, type ReceiveTarget } from "../../src/receiver/receive.ts";
import { stripeHandlers } from "../../src/handlers/stripe-money.ts";
import { mulberry32, shuffleInPlace } from "../../src/dev/random.ts";
import { migrate } from "../../src/db/migrate.ts";
import { loadMigrations } from "../../src/runtime/migrations-fs.ts";
import { eventBody, freshDatabase, SECRET, signedRequest, verified } from "../support/helpers.ts";
import { moneyOutEvent, truncateMoney } from "../support/money-out.ts";

const fresh = await freshDatabase();
const db = fresh.db;
afterAll(() => fresh.drop());
beforeEach(() => truncateMoney(db));

const TARGET: ReceiveTarget = { provider: "stripe", endpoint: "billing", handlers: stripeHandlers };
const IN1 = "in_1SmA1pLgUG5tbmjcRfA0xRef";
const IN2 = "in_1SmA2qLgUG5tbmjcRfB0xDsp";
const REF1 = "re_3SmA1pLgUG5tbmjc0Ref1";
const DISPUTE = "dp_1SmA2qLgUG5tbmjc0DspB";

/** The `data.object` of the money-out fixture with this prefix, with `changes` applied. */
function objectOf(prefix: string, changes: Record<string, unknown> = {}): Record<string, unknown> {
  return { ...(JSON.parse(moneyOutEvent(prefix).body) as { data: { object: Record<string, unknown> } }).data.object, ...changes };
}

/** The fixture with this prefix as a new event `id`, its object changed by `changes`. */
function changed(prefix: string, id: string, changes: Record<string, unknown>): string {
  return eventBody(id, moneyOutEvent(prefix).type, objectOf(prefix, changes));
}

/** Receives `bodies` one by one with receiveSync; returns the outcomes. */
async function receiveInOrder(bodies: string[]): Promise<string[]> {
  const outcomes: string[] = [];
  for (const body of bodies) outcomes.push(await receiveSync(db, TARGET, verified(body)));
  return outcomes;
}

/** Posts `bodies` signed to a sync-mode app, all at once; returns each outcome (a refused event: needs_review). */
async function deliverAtOnce(bodies: string[]): Promise<string[]> {
  const app = createApp({ db, endpoints: stripeEndpoints([{ name: "billing", secrets: [SECRET], mode: "sync" }]), log: () => {} });
  return Promise.all(
    bodies.map(async (body) => {
      const response = await app.fetch(await signedRequest("http://inbox.test/webhooks/stripe", body));
      const reply = (await response.json()) as { outcome?: string; error?: string };
      return response.status === 200 ? (reply.outcome ?? "?") : `${response.status} ${reply.error}`;
    }),
  );
}

/** Posts `bodies` signed to a sync-mode app one after the other; returns each outcome. */
async function deliverInOrder(bodies: string[]): Promise<string[]> {
  const outcomes: string[] = [];
  for (const body of bodies) outcomes.push(...(await deliverAtOnce([body])));
  return outcomes;
}

/** A query's rows as a plain array of records (what toEqual compares). */
async function rows(strings: TemplateStringsArray, ...values: never[]): Promise<Record<string, unknown>[]> {
  return [...(await db(strings, ...values))];
}

const ledger = () => rows`
  select invoice_id, kind, amount::int, currency, settlement_amount::int, settlement_currency, balance_transaction
    from ledger_entries_linked
   order by kind, balance_transaction
`;
const net = () => rows`
  select invoice_id, currency, paid::int, refunded::int, refunds_reversed::int, dispute_withdrawn::int, dispute_fees::int,
         dispute_fees_returned::int, dispute_reinstated::int, net::int
    from invoice_net
   order by invoice_id, currency
`;
const parked = async () =>
  (await db`select event_id from webhook_inbox where needs_review_at is not null order by event_id`).map((r) => r.event_id as string);

/**
 * Invoice 2 of the fixtures presented in EUR (10000) and settled by an account in USD; a refund of
 * 2500 EUR; a dispute of the other 7500 EUR, withdrawn at 1.1 (8250 USD and a 1500 USD fee) and
 * reinstated after it was won at 1.08 (8100 USD).
 */
function euroInvoice() {
  const eur = { currency: "eur" };
  const money = { amount_due: 10000 };
  const charge = objectOf("05_", { id: "ch_3SmA2qLgUG5tbmjc0DspB", payment_intent: "pi_3SmA2qLgUG5tbmjc0DspB", amount: 10000, ...eur });
  const refund = objectOf("09_", {
    id: "re_eur_1",
    charge: "ch_3SmA2qLgUG5tbmjc0DspB",
    payment_intent: "pi_3SmA2qLgUG5tbmjc0DspB",
    amount: 2500,
    balance_transaction: "txn_eur_refund",
    ...eur,
  });
  const [withdrawal, reinstatement] = objectOf("20_").balance_transactions as Record<string, unknown>[];
  const withdrawn = { ...withdrawal, amount: -8250, exchange_rate: 1.1, fee: 1500, net: -9750 };
  const reinstated = { ...reinstatement, amount: 8100, exchange_rate: 1.08, fee: 0, net: 8100 };
  const dispute = (status: string, txns: Record<string, unknown>[]) => ({ amount: 7500, ...eur, status, balance_transactions: txns });
  return {
    bodies: [
      changed("13_", "evt_eur_created", { ...eur, ...money }),
      changed("14_", "evt_eur_finalized", { ...eur, ...money }),
      changed("15_", "evt_eur_inpay", { ...eur, amount_paid: 10000 }),
      changed("16_", "evt_eur_paid", { ...eur, ...money, amount_paid: 10000 }),
      eventBody("evt_eur_charge", "charge.succeeded", charge),
      eventBody("evt_eur_refund", "refund.created", refund),
      changed("17_", "evt_eur_dp_created", dispute("needs_response", [withdrawn])),
      changed("18_", "evt_eur_dp_withdrawn", dispute("needs_response", [withdrawn])),
      changed("19_", "evt_eur_dp_closed", dispute("won", [withdrawn])),
      changed("20_", "evt_eur_dp_reinstated", dispute("won", [withdrawn, reinstated])),
    ],
    withdrawn,
    reinstated,
    dispute,
  };
}

describe("one basis for every ledger row", () => {
  test("`receiveSync()` books a refund and a dispute on a EUR charge settled in USD in EUR, with the USD settlement beside each dispute movement, in any order", async () => {
    const { bodies } = euroInvoice();
    for (const seed of [1, 2, 3]) {
      await truncateMoney(db);
      const order = [...bodies, ...bodies];
      shuffleInPlace(order, mulberry32(seed));
      expect(new Set(await receiveInOrder(order))).toEqual(new Set(["processed", "duplicate"]));
      expect(await ledger()).toEqual([
        {
          invoice_id: IN2,
          kind: "dispute_fee",
          amount: 1500,
          currency: "usd",
          settlement_amount: 1500,
          settlement_currency: "usd",
          balance_transaction: "txn_1SmA2qLgUG5tbmjc0DspW",
        },
        {
          invoice_id: IN2,
          kind: "dispute_reinstatement",
          amount: 7500,
          currency: "eur",
          settlement_amount: 8100,
          settlement_currency: "usd",
          balance_transaction: "txn_1SmA2qLgUG5tbmjc0DspR",
        },
        {
          invoice_id: IN2,
          kind: "dispute_withdrawal",
          amount: 7500,
          currency: "eur",
          settlement_amount: 8250,
          settlement_currency: "usd",
          balance_transaction: "txn_1SmA2qLgUG5tbmjc0DspW",
        },
        {
          invoice_id: IN2,
          kind: "payment",
          amount: 10000,
          currency: "eur",
          settlement_amount: null,
          settlement_currency: null,
          balance_transaction: null,
        },
        {
          invoice_id: IN2,
          kind: "refund",
          amount: 2500,
          currency: "eur",
          settlement_amount: null,
          settlement_currency: null,
          balance_transaction: "txn_eur_refund",
        },
      ]);
      // The customer's money adds up in EUR; Stripe's fee is a USD cost of its own, never added to EUR.
      expect(await net()).toEqual([
        {
          invoice_id: IN2,
          currency: "eur",
          paid: 10000,
          refunded: 2500,
          refunds_reversed: 0,
          dispute_withdrawn: 7500,
          dispute_fees: 0,
          dispute_fees_returned: 0,
          dispute_reinstated: 7500,
          net: 7500,
        },
        {
          invoice_id: IN2,
          currency: "usd",
          paid: 0,
          refunded: 0,
          refunds_reversed: 0,
          dispute_withdrawn: 0,
          dispute_fees: 1500,
          dispute_fees_returned: 0,
          dispute_reinstated: 0,
          net: -1500,
        },
      ]);
    }
  });

  test("`createApp()` parks a converted reinstatement of a dispute that was not won, whose EUR amount no event states, and keeps the withdrawal", async () => {
    const { bodies, withdrawn, reinstated, dispute } = euroInvoice();
    const partly = changed("20_", "evt_eur_dp_partly", dispute("lost", [withdrawn, { ...reinstated, amount: 2700, net: 2700 }]));
    expect(await deliverInOrder([...bodies.slice(0, 8), partly])).toEqual([...bodies.slice(0, 8).map(() => "processed"), "needs_review"]);
    expect(await parked()).toEqual(["evt_eur_dp_partly"]);
    expect((await ledger()).filter((l) => String(l.kind).startsWith("dispute_")).map((l) => [l.kind, l.amount, l.currency])).toEqual([
      ["dispute_fee", 1500, "usd"],
      ["dispute_withdrawal", 7500, "eur"],
    ]);
  });

  test("`receiveSync()` books a same-currency dispute as before, its settlement equal to its amount", async () => {
    await receiveInOrder(["13_", "14_", "15_", "16_", "17_", "18_", "19_", "20_"].map((p) => moneyOutEvent(p).body));
    expect((await ledger()).filter((l) => l.kind !== "payment")).toEqual([
      {
        invoice_id: IN2,
        kind: "dispute_fee",
        amount: 1500,
        currency: "usd",
        settlement_amount: 1500,
        settlement_currency: "usd",
        balance_transaction: "txn_1SmA2qLgUG5tbmjc0DspW",
      },
      {
        invoice_id: IN2,
        kind: "dispute_reinstatement",
        amount: 20000,
        currency: "usd",
        settlement_amount: 20000,
        settlement_currency: "usd",
        balance_transaction: "txn_1SmA2qLgUG5tbmjc0DspR",
      },
      {
        invoice_id: IN2,
        kind: "dispute_withdrawal",
        amount: 20000,
        currency: "usd",
        settlement_amount: 20000,
        settlement_currency: "usd",
        balance_transaction: "txn_1SmA2qLgUG5tbmjc0DspW",
      },
    ]);
  });
});

/** Refund 1 of the fixtures (2500 USD, txn_…re1) as Stripe shows it after it failed a day later: the money came back. */
function failedAfterMoved(id = "evt_refund_failed_after_moved"): string {
  return eventBody(id, "refund.failed", {
    ...objectOf("07_"),
    status: "failed",
    failure_reason: "expired_or_canceled_card",
    failure_balance_transaction: "txn_3SmA1pLgUG5tbmjc0re1fail",
  });
}

describe("money that came back", () => {
  const invoice1 = ["01_", "02_", "03_", "04_", "05_"].map((p) => moneyOutEvent(p).body);

  test("`receiveSync()` books a refund that failed after its money left and its reversal, once each, in either order and delivered twice", async () => {
    const succeeded = moneyOutEvent("07_").body;
    const failed = failedAfterMoved();
    for (const order of [
      [...invoice1, succeeded, failed, succeeded, failed],
      [failed, failed, succeeded, ...invoice1, succeeded],
      [failed, ...invoice1, failed, succeeded, succeeded],
      [...invoice1, failed, succeeded, failed, succeeded],
    ]) {
      await truncateMoney(db);
      expect(new Set(await receiveInOrder(order))).toEqual(new Set(["processed", "duplicate"]));
      expect((await ledger()).filter((l) => l.kind !== "payment")).toEqual([
        {
          invoice_id: IN1,
          kind: "refund",
          amount: 2500,
          currency: "usd",
          settlement_amount: null,
          settlement_currency: null,
          balance_transaction: "txn_3SmA1pLgUG5tbmjc0re1",
        },
        {
          invoice_id: IN1,
          kind: "refund_reversal",
          amount: 2500,
          currency: "usd",
          settlement_amount: null,
          settlement_currency: null,
          balance_transaction: "txn_3SmA1pLgUG5tbmjc0re1fail",
        },
      ]);
      expect(await rows`select aggregate_id, event_type from outbox where aggregate_type = 'Refund' order by id`).toEqual([
        { aggregate_id: REF1, event_type: "RefundBooked" },
        { aggregate_id: REF1, event_type: "RefundReversed" },
      ]);
      expect(await rows`select status, failure_balance_transaction from refunds`).toEqual([
        { status: "failed", failure_balance_transaction: "txn_3SmA1pLgUG5tbmjc0re1fail" },
      ]);
      expect(await net()).toEqual([
        {
          invoice_id: IN1,
          currency: "usd",
          paid: 10000,
          refunded: 2500,
          refunds_reversed: 2500,
          dispute_withdrawn: 0,
          dispute_fees: 0,
          dispute_fees_returned: 0,
          dispute_reinstated: 0,
          net: 10000,
        },
      ]);
      expect(await parked()).toEqual([]);
    }
  });

  test("`createApp()` books a failed refund's reversal once when its events arrive concurrently, twice each", async () => {
    for (let round = 0; round < 4; round++) {
      await truncateMoney(db);
      await receiveInOrder(invoice1);
      const both = [moneyOutEvent("07_").body, failedAfterMoved()];
      const outcomes = await deliverAtOnce([...both, ...both]);
      expect(outcomes.every((o) => o === "processed" || o === "duplicate")).toBe(true);
      expect(await rows`select kind, amount::int from ledger_entries where kind <> 'payment' order by kind`).toEqual([
        { kind: "refund", amount: 2500 },
        { kind: "refund_reversal", amount: 2500 },
      ]);
      expect(await rows`select count(*)::int as n from outbox where aggregate_type = 'Refund'`).toEqual([{ n: 2 }]);
    }
  });

  test("`receiveSync()` books a refund of the whole charge after an earlier refund failed and its money came back", async () => {
    const whole = eventBody("evt_refund_whole", "refund.created", {
      ...objectOf("09_"),
      id: "re_test_whole",
      amount: 10000,
      balance_transaction: "txn_test_whole",
    });
    expect(await receiveInOrder([...invoice1, moneyOutEvent("07_").body, failedAfterMoved(), whole])).toEqual([
      ...invoice1.map(() => "processed"),
      "processed",
      "processed",
      "processed",
    ]);
    expect(await net()).toEqual([
      {
        invoice_id: IN1,
        currency: "usd",
        paid: 10000,
        refunded: 12500,
        refunds_reversed: 2500,
        dispute_withdrawn: 0,
        dispute_fees: 0,
        dispute_fees_returned: 0,
        dispute_reinstated: 0,
        net: 0,
      },
    ]);
  });

  test("`createApp()` parks a failure balance transaction that differs from the one recorded, booking no second reversal", async () => {
    const other = eventBody("evt_refund_failed_other", "refund.failed", {
      ...JSON.parse(failedAfterMoved()).data.object,
      failure_balance_transaction: "txn_other_failure",
    });
    expect(await deliverInOrder([...invoice1, failedAfterMoved(), other]).then((o) => o.at(-1))).toBe("needs_review");
    expect(await parked()).toEqual(["evt_refund_failed_other"]);
    expect(await rows`select balance_transaction from ledger_entries where kind = 'refund_reversal'`).toEqual([
      { balance_transaction: "txn_3SmA1pLgUG5tbmjc0re1fail" },
    ]);
  });

  test("`receiveSync()` books a dispute fee that Stripe returned with the reinstatement, once, in any order; `createApp()` parks a return above the fee", async () => {
    const won = objectOf("20_");
    const [withdrawal, reinstatement] = won.balance_transactions as Record<string, unknown>[];
    const feeBack = {
      ...reinstatement,
      fee: -1500,
      net: 21500,
      fee_details: [{ amount: -1500, application: null, currency: "usd", description: "Dispute fee", type: "stripe_fee" }],
    };
    const reinstated = eventBody("evt_dp_fee_back", "charge.dispute.funds_reinstated", {
      ...won,
      balance_transactions: [withdrawal, feeBack],
    });
    const invoice2 = ["13_", "14_", "15_", "16_", "17_", "18_", "19_"].map((p) => moneyOutEvent(p).body);
    for (const order of [
      [...invoice2, reinstated, reinstated],
      [reinstated, ...invoice2, reinstated],
    ]) {
      await truncateMoney(db);
      expect(new Set(await receiveInOrder(order))).toEqual(new Set(["processed", "duplicate"]));
      expect((await ledger()).filter((l) => String(l.kind).startsWith("dispute_fee"))).toEqual([
        {
          invoice_id: IN2,
          kind: "dispute_fee",
          amount: 1500,
          currency: "usd",
          settlement_amount: 1500,
          settlement_currency: "usd",
          balance_transaction: "txn_1SmA2qLgUG5tbmjc0DspW",
        },
        {
          invoice_id: IN2,
          kind: "dispute_fee_reversal",
          amount: 1500,
          currency: "usd",
          settlement_amount: 1500,
          settlement_currency: "usd",
          balance_transaction: "txn_1SmA2qLgUG5tbmjc0DspR",
        },
      ]);
      expect(await rows`select aggregate_id, event_type from outbox where event_type = 'DisputeFeeReturned'`).toEqual([
        { aggregate_id: DISPUTE, event_type: "DisputeFeeReturned" },
      ]);
      expect(await net()).toEqual([
        {
          invoice_id: IN2,
          currency: "usd",
          paid: 20000,
          refunded: 0,
          refunds_reversed: 0,
          dispute_withdrawn: 20000,
          dispute_fees: 1500,
          dispute_fees_returned: 1500,
          dispute_reinstated: 20000,
          net: 20000,
        },
      ]);
    }
    await truncateMoney(db);
    const tooMuch = eventBody("evt_dp_fee_back_twice", "charge.dispute.funds_reinstated", {
      ...won,
      balance_transactions: [withdrawal, { ...feeBack, fee: -3000, net: 23000 }],
    });
    expect(await deliverInOrder([tooMuch])).toEqual(["needs_review"]);
    expect(await rows`select kind from ledger_entries`).toEqual([]);
  });
});

describe("rows booked before the ledger kept one basis", () => {
  test("`migrate()` carries the rows of a converted dispute booked before onto the presentment basis, and its events delivered again change nothing", async () => {
    const old = await freshDatabase({ migrated: false });
    try {
      const all = loadMigrations();
      const basis = all.findIndex((m) => m.name.endsWith("_ledger_basis_money_back.sql"));
      expect(basis).toBeGreaterThan(0);
      await migrate(old.db, all.slice(0, basis));
      // What the handlers booked for the EUR invoice of euroInvoice() before: dispute rows in USD.
      await old.db`
        insert into disputes (id, charge, payment_intent, amount, currency, status, status_rank)
        values (${DISPUTE}, 'ch_3SmA2qLgUG5tbmjc0DspB', 'pi_3SmA2qLgUG5tbmjc0DspB', 7500, 'eur', 'won', 4)
      `;
      await old.db`
        insert into ledger_entries (kind, amount, currency, balance_transaction, payment_intent, charge, source_id, event_id)
        values ('dispute_withdrawal', 8250, 'usd', 'txn_1SmA2qLgUG5tbmjc0DspW', 'pi_3SmA2qLgUG5tbmjc0DspB', 'ch_3SmA2qLgUG5tbmjc0DspB', ${DISPUTE}, 'evt_old'),
               ('dispute_fee', 1500, 'usd', 'txn_1SmA2qLgUG5tbmjc0DspW', 'pi_3SmA2qLgUG5tbmjc0DspB', 'ch_3SmA2qLgUG5tbmjc0DspB', ${DISPUTE}, 'evt_old'),
               ('dispute_reinstatement', 8100, 'usd', 'txn_1SmA2qLgUG5tbmjc0DspR', 'pi_3SmA2qLgUG5tbmjc0DspB', 'ch_3SmA2qLgUG5tbmjc0DspB', ${DISPUTE}, 'evt_old'),
               ('refund', 2500, 'eur', 'txn_eur_refund', 'pi_3SmA2qLgUG5tbmjc0DspB', 'ch_3SmA2qLgUG5tbmjc0DspB', 're_eur_1', 'evt_old')
      `;
      await migrate(old.db, all);
      const rowsNow = () => old.db`
        select kind, amount::int, currency, settlement_amount::int, settlement_currency
          from ledger_entries
         order by kind
      `;
      const migrated = [...(await rowsNow())];
      expect(migrated).toEqual([
        { kind: "dispute_fee", amount: 1500, currency: "usd", settlement_amount: 1500, settlement_currency: "usd" },
        { kind: "dispute_reinstatement", amount: 7500, currency: "eur", settlement_amount: 8100, settlement_currency: "usd" },
        { kind: "dispute_withdrawal", amount: 7500, currency: "eur", settlement_amount: 8250, settlement_currency: "usd" },
        { kind: "refund", amount: 2500, currency: "eur", settlement_amount: null, settlement_currency: null },
      ]);
      const { bodies } = euroInvoice();
      const disputeEvents = bodies.filter((b) => JSON.parse(b).type.startsWith("charge.dispute."));
      for (const body of disputeEvents) expect(await receiveSync(old.db, TARGET, verified(body))).toBe("processed");
      expect([...(await rowsNow())]).toEqual(migrated);
      expect([...(await old.db`select count(*)::int as n from outbox`)]).toEqual([{ n: 0 }]);
    } finally {
      await old.drop();
    }
  });
});
