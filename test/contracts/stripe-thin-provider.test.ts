// The thin-event provider through the provider contract suite, signed by Stripe's own test helper
// (thin notifications are signed exactly like classic events).
import { expect, test } from "bun:test";
import Stripe from "stripe";
import { readThinNotification, stripeThinProvider, thinSubject } from "../../src/providers/stripe-thin.ts";
import { AppError } from "../../src/errors.ts";
import { providerContractSuite } from "./provider-suite.ts";

const stripe = new Stripe("sk_test_unused");
const cryptoProvider = Stripe.createSubtleCryptoProvider();
const sign = async (payload: string, secret: string, timestamp: number) => ({
  "stripe-signature": await stripe.webhooks.generateTestHeaderStringAsync({ payload, secret, timestamp, cryptoProvider }),
});

const notification = {
  id: "evt_test_65SuiteThin",
  object: "v2.core.event",
  type: "v1.invoice.paid",
  created: "2026-11-30T00:12:00.000Z",
  livemode: false,
  related_object: { id: "in_1SuiteA", type: "invoice", url: "/v1/invoices/in_1SuiteA" },
  snapshot_event: "evt_1SuiteA",
};
const body = JSON.stringify(notification, null, 2);

providerContractSuite({
  provider: stripeThinProvider,
  sign,
  secrets: ["whsec_suite_first", "whsec_suite_second"],
  sample: { body, id: notification.id, type: "v1.invoice.paid", subject: { object: notification, key: "in_1SuiteA" } },
  requiredHeaders: ["stripe-signature"],
  malformed: (headers) => {
    const signature = headers["stripe-signature"]!;
    const v1 = signature.split(",").find((part) => part.startsWith("v1="))!;
    return [{ "stripe-signature": v1 }, { "stripe-signature": `t=12ab,${v1}` }, { "stripe-signature": signature.split(",")[0]! }];
  },
  notEvents: [
    // A classic event: stripe-node's parser refuses it on a thin endpoint.
    JSON.stringify({ id: "evt_1Classic", object: "event", type: "invoice.paid", data: { object: { id: "in_1" } } }),
    JSON.stringify({ ...notification, object: "v2.core.account" }),
    JSON.stringify({ ...notification, id: "not_an_event" }),
    JSON.stringify({ ...notification, related_object: { id: "in_1", type: "invoice", url: 42 } }),
    JSON.stringify({ ...notification, snapshot_event: 42 }),
    JSON.stringify([1, 2]),
    "not json",
  ],
  withoutSubject: { id: "evt_1Classic", object: "event", type: "invoice.paid", data: { object: { id: "in_1" } } },
});

test("`verify()` keeps a 1 s tolerance as given: stripe-node's parser would turn 0 into 300 s, ours is always > 0 and checked both ways first", async () => {
  const nowMs = 1_764_461_520_000;
  const headers = new Headers(await sign(body, "whsec_suite_first", nowMs / 1000 - 2));
  const err = await stripeThinProvider.verify({ body, headers, secrets: ["whsec_suite_first"], toleranceSec: 1, nowMs }).then(
    () => undefined,
    (e: unknown) => e,
  );
  expect((err as AppError).code).toBe("timestamp_out_of_tolerance");
});

test("`readThinNotification()` accepts a notification without related_object or snapshot_event (the health type)", () => {
  const health = {
    id: "evt_test_health",
    object: "v2.core.event",
    type: "v2.core.health.event_generation_failure.resolved",
    created: "2026-12-01T00:00:00Z",
    livemode: false,
  };
  expect(readThinNotification(health).type).toBe(health.type);
  expect(thinSubject(health).key).toBeUndefined();
});

test("`readThinNotification()` leaves related_object.url's form to the worker: nested Stripe paths and any other string are read as given", () => {
  for (const url of [
    "/v1/accounts/acct_1Nested/persons/person_1Nested",
    "https://elsewhere.example/v1/invoices/in_1",
    "/v1/invoices/in_1?x=1",
  ]) {
    const read = readThinNotification({ ...notification, related_object: { id: "in_1", type: "invoice", url } });
    expect(read.related_object?.url).toBe(url);
  }
});
