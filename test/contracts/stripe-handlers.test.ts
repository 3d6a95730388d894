// The Stripe handler table (billing and money going out) passes the handler table contract with the
// money-out fixtures (test/fixtures/stripe/money-out/README.md gives the end state checked here), also
// when the same facts arrive again as distinct Event objects of sibling types, and with an invoice
// marked uncollectible and then paid.
import type { Db } from "../../src/db/db.ts";
import { stripeHandlers } from "../../src/handlers/stripe-money.ts";
import { signStripePayload, stripeProvider } from "../../src/providers/stripe.ts";
import { eventBody, invoice, lifecycle } from "../support/helpers.ts";
import { checkoutEvents, subscriptionEvents } from "../support/checkout-subscriptions.ts";
import { MONEY_OUT_END_STATE, moneyOut, moneyOutState } from "../support/money-out.ts";
import { everyHandlerRunTest, handlerTableSuite } from "./handler-table-suite.ts";

/** Stripe's signature header for `body`, as Stripe sends it. */
async function signStripe(body: string, secret: string, timestampSec: number): Promise<Record<string, string>> {
  return { "stripe-signature": await signStripePayload(body, secret, timestampSec) };
}

/** The money-out business state; the inbox's own states differ by mode (replay records events `ignored` first). */
async function businessState(db: Db): Promise<unknown> {
  const { inbox: _inbox, ...business } = await moneyOutState(db);
  return business;
}
const { inbox: _inbox, ...EXPECTED } = MONEY_OUT_END_STATE;

handlerTableSuite({
  name: "stripe: money going out (refunds, a dispute)",
  handlers: stripeHandlers,
  provider: stripeProvider,
  sign: signStripe,
  events: moneyOut(),
  endState: businessState,
  expected: EXPECTED,
});

/** Event types Stripe sends for the same object as a fixture's, with the fixture's object: the same fact as a distinct Event. */
const SIBLING_TYPES: Record<string, string> = {
  "charge.succeeded": "charge.captured",
  "refund.updated": "charge.refund.updated",
  "charge.dispute.created": "charge.dispute.updated",
};
const siblings = moneyOut()
  .filter((e) => SIBLING_TYPES[(JSON.parse(e.body) as { type: string }).type] !== undefined)
  .map((e) => {
    const event = JSON.parse(e.body) as { id: string; type: string };
    const type = SIBLING_TYPES[event.type] as string;
    const body = JSON.stringify({ ...event, id: `${event.id}sib`, type }, null, 2);
    return { name: `${event.id}sib_${type}.json`, body };
  });

handlerTableSuite({
  name: "stripe: money going out, each fact also as a sibling event type",
  handlers: stripeHandlers,
  provider: stripeProvider,
  sign: signStripe,
  events: [...moneyOut(), ...siblings],
  endState: businessState,
  expected: EXPECTED,
});

/** An invoice that was marked uncollectible and then paid after all (Stripe allows paying an uncollectible invoice). */
const RECOVERED = "in_contract_recovered_stripe";
const recovered = [
  ["evt_contract_s1", "invoice.created", { status: "draft" }],
  ["evt_contract_s2", "invoice.finalized", { status: "open" }],
  ["evt_contract_s3", "invoice.marked_uncollectible", { status: "uncollectible" }],
  ["evt_contract_s4", "invoice.paid", { status: "paid", amount_paid: 3100 }],
  ["evt_contract_s5", "invoice.payment_succeeded", { status: "paid", amount_paid: 3100 }],
].map(([id, type, fields]) => ({
  name: `${id}.json`,
  body: eventBody(id as string, type as string, invoice({ id: RECOVERED, amount_due: 3100, ...(fields as object) })),
}));

handlerTableSuite({
  name: "stripe: an uncollectible invoice paid after all",
  handlers: stripeHandlers,
  provider: stripeProvider,
  sign: signStripe,
  events: recovered,
  endState: async (db) => [
    ...(await db`select id, status, amount_paid::int from invoices order by id`),
    ...(await db`select invoice_id, kind, amount::int from ledger_entries order by id`),
  ],
  expected: [
    { id: RECOVERED, status: "paid", amount_paid: 3100 },
    { invoice_id: RECOVERED, kind: "payment", amount: 3100 },
  ],
});

everyHandlerRunTest("stripe", stripeHandlers, [lifecycle(), moneyOut(), siblings, recovered, checkoutEvents(), subscriptionEvents()]);
