import { mulberry32, shuffleInPlace } from "../random.ts";
import { stripeEventBody as eventBody } from "../stripe-event.ts";

/** How an invoice's life goes in a storm, and so its expected end state. */
export type Lifecycle = "paid" | "void" | "uncollectible_then_paid" | "refunded" | "disputed_won" | "disputed_lost" | "poison";

/** One event of the storm: its Stripe id and type, the exact body to sign, and its invoice. */
export interface StormEvent {
  id: string;
  type: string;
  invoiceId: string;
  body: string;
  /** The order Stripe created the events in (before the shuffle): the last event of an object carries its current state. */
  seq?: number;
}

/** What the database must say for one invoice once the storm has drained. Amounts in minor units. */
export interface ExpectedInvoice {
  invoiceId: string;
  lifecycle: Lifecycle;
  /** null: the invoice must not exist (poison events are parked, never applied). */
  status: "paid" | "void" | null;
  /** The one `payment` ledger entry's amount, or null when none may exist. */
  payment: number | null;
  /**
   * Money out linked to the invoice, in minor units, each booked once by its balance transaction:
   * refunded, dispute_withdrawn, dispute_fees, dispute_reinstated; `net` = payment − the first three + the last.
   */
  money: { refunded: number; disputeWithdrawn: number; disputeFees: number; disputeReinstated: number; net: number };
}

/** A generated storm and its model. */
export interface Storm {
  events: StormEvent[];
  expected: ExpectedInvoice[];
  /** Event ids that must end as needs-review (injected on purpose). */
  poisonEventIds: string[];
}

const INVOICE_STEPS: Record<"paid" | "void" | "uncollectible_then_paid", string[]> = {
  paid: ["invoice.created", "invoice.finalized", "invoice.paid", "invoice.payment_succeeded"],
  void: ["invoice.created", "invoice.finalized", "invoice.voided"],
  uncollectible_then_paid: [
    "invoice.created",
    "invoice.finalized",
    "invoice.marked_uncollectible",
    "invoice.paid",
    "invoice.payment_succeeded",
  ],
};
const KINDS: Exclude<Lifecycle, "poison">[] = ["paid", "void", "uncollectible_then_paid", "refunded", "disputed_won", "disputed_lost"];
/** The dispute fee Stripe takes when funds are withdrawn (minor units). */
const DISPUTE_FEE = 1500;

/**
 * Builds `invoices` invoice lifecycles like the fixtures (created → finalized → paid +
 * payment_succeeded, or → voided, or → marked_uncollectible → paid + payment_succeeded, or paid and
 * then refunded or disputed like the money-out fixtures: see {@link moneyOutEvents}), with
 * Stripe-shaped, pretty-printed bodies, plus `poison` invoices whose single event lacks `customer`
 * (a PermanentError: it must end needs-review, never applied). Deterministic for a seed.
 * The model does not depend on delivery order: handlers are monotonic, so any order reaches it.
 */
export function generateStorm(options: { invoices: number; poison?: number; seed: number }): Storm {
  const random = mulberry32(options.seed);
  const run = `${options.seed.toString(36)}${Math.floor(random() * 1e6).toString(36)}`;
  const events: StormEvent[] = [];
  const expected: ExpectedInvoice[] = [];
  const poisonEventIds: string[] = [];
  for (let i = 0; i < options.invoices + (options.poison ?? 0); i++) {
    const invoiceId = `in_chaos${run}x${i}`;
    const customer = `cus_chaos${run}x${i}`;
    const amount = 100 + Math.floor(random() * 500_000);
    if (i >= options.invoices) {
      const id = `evt_chaos${run}x${i}poison`;
      events.push({
        id,
        type: "invoice.paid",
        invoiceId,
        body: eventBody(id, "invoice.paid", invoiceObject(invoiceId, null, amount, "paid")),
      });
      expected.push({ invoiceId, lifecycle: "poison", status: null, payment: null, money: NO_MONEY_OUT(0) });
      poisonEventIds.push(id);
      continue;
    }
    const lifecycle = KINDS[Math.floor(random() * KINDS.length)] ?? "paid";
    const steps = lifecycle in INVOICE_STEPS ? INVOICE_STEPS[lifecycle as keyof typeof INVOICE_STEPS] : INVOICE_STEPS.paid;
    steps.forEach((type, step) => {
      const id = `evt_chaos${run}x${i}s${step}`;
      events.push({ id, type, invoiceId, body: eventBody(id, type, invoiceObject(invoiceId, customer, amount, statusAfter(type))) });
    });
    const money = moneyOutEvents(lifecycle, `${run}x${i}`, invoiceId, amount);
    events.push(...money.events);
    const paid = lifecycle !== "void";
    expected.push({ invoiceId, lifecycle, status: paid ? "paid" : "void", payment: paid ? amount : null, money: money.expected });
  }
  events.forEach((e, seq) => (e.seq = seq));
  shuffleInPlace(events, random);
  return { events, expected, poisonEventIds };
}

/** No money out: the net is the payment (0 when none). */
const NO_MONEY_OUT = (net: number): ExpectedInvoice["money"] => ({
  refunded: 0,
  disputeWithdrawn: 0,
  disputeFees: 0,
  disputeReinstated: 0,
  net,
});

/**
 * The money-out events of a paid invoice's lifecycle, shaped like the money-out fixtures, and what
 * they must book. Every such lifecycle links the invoice to its payment intent (invoice_payment.paid).
 * `refunded`: charge.succeeded, a partial refund pending then succeeded (a quarter of the amount), and
 * a refund pending then failed (books nothing). `disputed_won`: the dispute created and funds
 * withdrawn (the whole amount and a fee, one balance transaction), closed won, funds reinstated (which
 * lists both transactions). `disputed_lost`: created, withdrawn, closed lost.
 */
function moneyOutEvents(
  lifecycle: Lifecycle,
  key: string,
  invoiceId: string,
  amount: number,
): { events: StormEvent[]; expected: ExpectedInvoice["money"] } {
  if (lifecycle !== "refunded" && lifecycle !== "disputed_won" && lifecycle !== "disputed_lost") {
    return { events: [], expected: NO_MONEY_OUT(lifecycle === "void" ? 0 : amount) };
  }
  const pi = `pi_chaos${key}`;
  const charge = `ch_chaos${key}`;
  const events: StormEvent[] = [];
  const add = (step: string, type: string, object: Record<string, unknown>) => {
    const id = `evt_chaos${key}m${step}`;
    events.push({ id, type, invoiceId, body: eventBody(id, type, object) });
  };
  add("ip", "invoice_payment.paid", {
    id: `inpay_chaos${key}`,
    object: "invoice_payment",
    invoice: invoiceId,
    amount_paid: amount,
    currency: "usd",
    status: "paid",
    payment: { type: "payment_intent", payment_intent: pi },
  });
  if (lifecycle === "refunded") {
    const refunded = Math.floor(amount / 4);
    const refund = (n: string, value: number, status: string, txn: string | null) => ({
      id: `re_chaos${key}r${n}`,
      object: "refund",
      amount: value,
      charge,
      payment_intent: pi,
      currency: "usd",
      status,
      balance_transaction: txn,
    });
    add("ch", "charge.succeeded", {
      id: charge,
      object: "charge",
      amount,
      currency: "usd",
      payment_intent: pi,
      status: "succeeded",
      paid: true,
    });
    add("r1c", "refund.created", refund("1", refunded, "pending", null));
    add("r1u", "refund.updated", refund("1", refunded, "succeeded", `txn_chaos${key}r1`));
    add("r2c", "refund.created", refund("2", 1, "pending", null));
    add("r2f", "refund.failed", refund("2", 1, "failed", null));
    return { events, expected: { ...NO_MONEY_OUT(amount - refunded), refunded } };
  }
  const withdrawal = { id: `txn_chaos${key}dw`, object: "balance_transaction", amount: -amount, fee: DISPUTE_FEE, currency: "usd" };
  const reinstatement = { id: `txn_chaos${key}dr`, object: "balance_transaction", amount, fee: 0, currency: "usd" };
  const dispute = (status: string, transactions: object[]) => ({
    id: `dp_chaos${key}`,
    object: "dispute",
    amount,
    charge,
    payment_intent: pi,
    currency: "usd",
    status,
    balance_transactions: transactions,
  });
  add("dc", "charge.dispute.created", dispute("needs_response", [withdrawal]));
  add("dw", "charge.dispute.funds_withdrawn", dispute("needs_response", [withdrawal]));
  const won = lifecycle === "disputed_won";
  add("dx", "charge.dispute.closed", dispute(won ? "won" : "lost", [withdrawal]));
  if (won) add("dr", "charge.dispute.funds_reinstated", dispute("won", [withdrawal, reinstatement]));
  const out = { disputeWithdrawn: amount, disputeFees: DISPUTE_FEE, disputeReinstated: won ? amount : 0 };
  return { events, expected: { ...NO_MONEY_OUT(0), ...out, net: amount - amount - DISPUTE_FEE + out.disputeReinstated } };
}

function statusAfter(type: string): string {
  return (
    { "invoice.created": "draft", "invoice.finalized": "open", "invoice.voided": "void", "invoice.marked_uncollectible": "uncollectible" }[
      type
    ] ?? "paid"
  );
}

function invoiceObject(id: string, customer: string | null, amount: number, status: string): Record<string, unknown> {
  const paid = status === "paid";
  return {
    id,
    object: "invoice",
    customer,
    currency: "usd",
    status,
    amount_due: amount,
    amount_paid: paid ? amount : 0,
    amount_remaining: paid ? 0 : amount,
    collection_method: "charge_automatically",
    livemode: false,
  };
}
