// The Stripe provider through the provider contract suite, signed by Stripe's own test helper.
import { expect, test } from "bun:test";
import Stripe from "stripe";
import { stripeProvider, stripeSubject } from "../../src/providers/stripe.ts";
import { providerContractSuite } from "./provider-suite.ts";

const stripe = new Stripe("sk_test_unused");
const cryptoProvider = Stripe.createSubtleCryptoProvider();

const payment = {
  id: "inpay_1SuiteA",
  object: "invoice_payment",
  invoice: "in_1SuiteA",
  amount_paid: 2000,
  currency: "usd",
  status: "paid",
};
const body = JSON.stringify(
  {
    id: "evt_1SuiteA",
    object: "event",
    api_version: "2025-09-30.clover",
    created: 1764461520,
    type: "invoice_payment.paid",
    data: { object: payment },
  },
  null,
  2,
);

providerContractSuite({
  provider: stripeProvider,
  sign: async (payload, secret, timestamp) => ({
    "stripe-signature": await stripe.webhooks.generateTestHeaderStringAsync({ payload, secret, timestamp, cryptoProvider }),
  }),
  secrets: ["whsec_suite_first", "whsec_suite_second"],
  sample: { body, id: "evt_1SuiteA", type: "invoice_payment.paid", subject: { object: payment, key: "in_1SuiteA" } },
  requiredHeaders: ["stripe-signature"],
  malformed: (headers) => {
    const signature = headers["stripe-signature"]!;
    const v1 = signature.split(",").find((part) => part.startsWith("v1="))!;
    return [{ "stripe-signature": v1 }, { "stripe-signature": `t=12ab,${v1}` }, { "stripe-signature": signature.split(",")[0]! }];
  },
  notEvents: [
    JSON.stringify({ object: "list", data: [] }),
    JSON.stringify({ id: "evt_1NoData", object: "event", type: "invoice.paid", data: {} }),
    JSON.stringify({ id: "evt_1ArrayData", object: "event", type: "invoice.paid", data: { object: [1] } }),
    JSON.stringify([1, 2]),
    "not json",
  ],
  withoutSubject: { id: "evt_1NoData", object: "event", type: "invoice.paid", data: {} },
});

test("`stripeSubject()` keys an object by the invoice it links to (id or expanded), else by its own id", () => {
  const event = (object: Record<string, unknown>) => ({ id: "evt_1", object: "event", type: "x", data: { object } });
  expect(stripeSubject(event({ id: "in_1", object: "invoice" })).key).toBe("in_1");
  expect(stripeSubject(event({ id: "inpay_1", invoice: { id: "in_2", object: "invoice" } })).key).toBe("in_2");
  expect(stripeSubject(event({ id: "re_1", charge: "ch_1", invoice: null })).key).toBe("re_1");
  expect(stripeSubject(event({ object: "balance" })).key).toBeUndefined();
});
