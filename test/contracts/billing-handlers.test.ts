// Billing's handler table passes the handler table contract with the Stripe invoice lifecycle
// fixtures (test/fixtures/stripe/README.md gives the end state checked here).
import { expect } from "bun:test";
import type { Db } from "../../src/db/db.ts";
import { billingHandlers } from "../../src/handlers/billing.ts";
import { signStripePayload, stripeProvider } from "../../src/providers/stripe.ts";
import { eventBody, invoice, lifecycle } from "../support/helpers.ts";
import { everyHandlerRunTest, handlerTableSuite } from "./handler-table-suite.ts";

/** Stripe's signature header for `body`, as Stripe sends it. */
async function signStripe(body: string, secret: string, timestampSec: number): Promise<Record<string, string>> {
  return { "stripe-signature": await signStripePayload(body, secret, timestampSec) };
}

/** Invoices, ledger entries and outbox messages, without timestamps, generated ids or the booking event's id (paid and payment_succeeded race for it). */
async function billingState(db: Db): Promise<unknown> {
  return {
    invoices: [
      ...(await db`select id, customer_id, status, currency, amount_due::int, amount_paid::int, paid_at is not null as has_paid_at from invoices order by id`),
    ],
    ledger: [...(await db`select invoice_id, kind, amount::int, currency from ledger_entries order by invoice_id, kind`)],
    outbox: [
      ...(await db`select aggregate_type, aggregate_id, event_type, payload - 'event_id' as payload from outbox order by aggregate_id, event_type`),
    ],
  };
}

const PAID_1 = "in_1SkA1pLgUG5tbmjcQ7nB2vXa";
const VOID_2 = "in_1SkA2qLgUG5tbmjcR8oC3wYb";
const PAID_3 = "in_1SkA3rLgUG5tbmjcS9pD4xZc";

handlerTableSuite({
  name: "billing: Stripe invoice lifecycle",
  handlers: billingHandlers,
  provider: stripeProvider,
  sign: signStripe,
  events: lifecycle(),
  endState: billingState,
  expected: {
    invoices: [
      {
        id: PAID_1,
        customer_id: expect.any(String),
        status: "paid",
        currency: "usd",
        amount_due: 2000,
        amount_paid: 2000,
        has_paid_at: true,
      },
      {
        id: VOID_2,
        customer_id: expect.any(String),
        status: "void",
        currency: "usd",
        amount_due: 4999,
        amount_paid: 0,
        has_paid_at: false,
      },
      {
        id: PAID_3,
        customer_id: expect.any(String),
        status: "paid",
        currency: "usd",
        amount_due: 129900,
        amount_paid: 129900,
        has_paid_at: true,
      },
    ],
    ledger: [
      { invoice_id: PAID_1, kind: "payment", amount: 2000, currency: "usd" },
      { invoice_id: PAID_3, kind: "payment", amount: 129900, currency: "usd" },
    ],
    outbox: [
      {
        aggregate_type: "Invoice",
        aggregate_id: PAID_1,
        event_type: "InvoicePaymentBooked",
        payload: { invoice_id: PAID_1, amount: 2000, currency: "usd" },
      },
      {
        aggregate_type: "Invoice",
        aggregate_id: PAID_3,
        event_type: "InvoicePaymentBooked",
        payload: { invoice_id: PAID_3, amount: 129900, currency: "usd" },
      },
    ],
  },
});

/** An invoice that was marked uncollectible and then paid after all (Stripe allows paying an uncollectible invoice). */
const RECOVERED = "in_contract_recovered";
const recovered = [
  ["evt_contract_r1", "invoice.created", { status: "draft" }],
  ["evt_contract_r2", "invoice.finalized", { status: "open" }],
  ["evt_contract_r3", "invoice.marked_uncollectible", { status: "uncollectible" }],
  ["evt_contract_r4", "invoice.paid", { status: "paid", amount_paid: 3100 }],
  ["evt_contract_r5", "invoice.payment_succeeded", { status: "paid", amount_paid: 3100 }],
].map(([id, type, fields]) => ({
  name: `${id}.json`,
  body: eventBody(id as string, type as string, invoice({ id: RECOVERED, amount_due: 3100, ...(fields as object) })),
}));

handlerTableSuite({
  name: "billing: an uncollectible invoice paid after all",
  handlers: billingHandlers,
  provider: stripeProvider,
  sign: signStripe,
  events: recovered,
  endState: billingState,
  expected: {
    invoices: [
      { id: RECOVERED, customer_id: "cus_test_1", status: "paid", currency: "usd", amount_due: 3100, amount_paid: 3100, has_paid_at: true },
    ],
    ledger: [{ invoice_id: RECOVERED, kind: "payment", amount: 3100, currency: "usd" }],
    outbox: [
      {
        aggregate_type: "Invoice",
        aggregate_id: RECOVERED,
        event_type: "InvoicePaymentBooked",
        payload: { invoice_id: RECOVERED, amount: 3100, currency: "usd" },
      },
    ],
  },
});

everyHandlerRunTest("billing", billingHandlers, [lifecycle(), recovered]);
