import { mulberry32, shuffleInPlace } from "../random.ts";

/** How an invoice's life goes in a storm, and so its expected end state. */
export type Lifecycle = "paid" | "void" | "uncollectible_then_paid" | "poison";

/** One event of the storm: its Stripe id and type, the exact body to sign, and its invoice. */
export interface StormEvent {
  id: string;
  type: string;
  invoiceId: string;
  body: string;
}

/** What the database must say for one invoice once the storm has drained. Amounts in minor units. */
export interface ExpectedInvoice {
  invoiceId: string;
  lifecycle: Lifecycle;
  /** null: the invoice must not exist (poison events are parked, never applied). */
  status: "paid" | "void" | null;
  /** The one `payment` ledger entry's amount, or null when none may exist. */
  payment: number | null;
}

/** A generated storm and its model. */
export interface Storm {
  events: StormEvent[];
  expected: ExpectedInvoice[];
  /** Event ids that must end as needs-review (injected on purpose). */
  poisonEventIds: string[];
}

const STEPS: Record<Exclude<Lifecycle, "poison">, string[]> = {
  paid: ["invoice.created", "invoice.finalized", "invoice.paid", "invoice.payment_succeeded"],
  void: ["invoice.created", "invoice.finalized", "invoice.voided"],
  uncollectible_then_paid: ["invoice.created", "invoice.finalized", "invoice.marked_uncollectible", "invoice.paid", "invoice.payment_succeeded"],
};

/**
 * Builds `invoices` invoice lifecycles like the fixtures (created → finalized → paid +
 * payment_succeeded, or → voided, or → marked_uncollectible → paid + payment_succeeded), with
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
  const kinds = Object.keys(STEPS) as (keyof typeof STEPS)[];
  for (let i = 0; i < options.invoices + (options.poison ?? 0); i++) {
    const invoiceId = `in_chaos${run}x${i}`;
    const customer = `cus_chaos${run}x${i}`;
    const amount = 100 + Math.floor(random() * 500_000);
    if (i >= options.invoices) {
      const id = `evt_chaos${run}x${i}poison`;
      events.push({ id, type: "invoice.paid", invoiceId, body: eventBody(id, "invoice.paid", invoiceObject(invoiceId, null, amount, "paid")) });
      expected.push({ invoiceId, lifecycle: "poison", status: null, payment: null });
      poisonEventIds.push(id);
      continue;
    }
    const lifecycle = kinds[Math.floor(random() * kinds.length)] ?? "paid";
    STEPS[lifecycle].forEach((type, step) => {
      const id = `evt_chaos${run}x${i}s${step}`;
      events.push({ id, type, invoiceId, body: eventBody(id, type, invoiceObject(invoiceId, customer, amount, statusAfter(type))) });
    });
    const paid = lifecycle !== "void";
    expected.push({ invoiceId, lifecycle, status: paid ? "paid" : "void", payment: paid ? amount : null });
  }
  shuffleInPlace(events, random);
  return { events, expected, poisonEventIds };
}

function statusAfter(type: string): string {
  return { "invoice.created": "draft", "invoice.finalized": "open", "invoice.voided": "void", "invoice.marked_uncollectible": "uncollectible" }[type] ?? "paid";
}

function invoiceObject(id: string, customer: string | null, amount: number, status: string): Record<string, unknown> {
  const paid = status === "paid";
  return {
    id, object: "invoice", customer, currency: "usd", status,
    amount_due: amount, amount_paid: paid ? amount : 0, amount_remaining: paid ? 0 : amount,
    collection_method: "charge_automatically", livemode: false,
  };
}

function eventBody(id: string, type: string, object: Record<string, unknown>): string {
  return JSON.stringify({ id, object: "event", api_version: "2025-09-30.clover", created: 1764461520, livemode: false, pending_webhooks: 1, type, data: { object } }, null, 2);
}
