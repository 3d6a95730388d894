// Shopify through the provider contract suite and the delivery contract, with test/fixtures/shopify/.
import { join } from "node:path";
import { afterAll, expect, test } from "bun:test";
import { readProviderFixtures } from "../../src/dev/provider-delivery.ts";
import { shopifyHandlers } from "../../src/handlers/shopify-orders.ts";
import { shopifyProvider, signShopifyPayload } from "../../src/providers/shopify.ts";
import { createApp } from "../../src/receiver/app.ts";
import { FIXTURES_DIR, freshDatabase } from "../support/helpers.ts";
import { outboxRows, providerDeliverySuite } from "./provider-delivery-suite.ts";
import { providerContractSuite } from "./provider-suite.ts";

const SECRETS = ["shpss_client_secret_one_0123456789", "shpss_client_secret_two_9876543210"] as const;
const EVENT_ID = "5c2f1e47-1a6b-4a0b-9c1f-5f7a7e6b3d21";
const fixtures = readProviderFixtures([join(FIXTURES_DIR, "shopify")]);
/** The database of this file's own tests (each suite has one of its own). */
const fresh = await freshDatabase();
afterAll(() => fresh.drop());
const paid = fixtures.find((f) => f.name === "orders-paid-1001.json")!;

const headers = async (body: string, secret: string) => ({
  "x-shopify-topic": "orders/paid",
  "x-shopify-event-id": EVENT_ID,
  "x-shopify-webhook-id": crypto.randomUUID(),
  "x-shopify-triggered-at": "2022-01-01T00:00:05.000000Z",
  "x-shopify-hmac-sha256": await signShopifyPayload(body, secret),
});

providerContractSuite({
  provider: shopifyProvider,
  sign: (body, secret) => headers(body, secret),
  secrets: SECRETS,
  sample: {
    body: paid.body,
    id: EVENT_ID,
    type: "orders/paid",
    subject: { object: JSON.parse(paid.body) as Record<string, unknown>, key: "gid://shopify/Order/820982911946154508" },
  },
  requiredHeaders: ["x-shopify-hmac-sha256", "x-shopify-topic", "x-shopify-event-id"],
  malformed: (h) => [
    { ...h, "x-shopify-hmac-sha256": "not base64!" },
    { ...h, "x-shopify-hmac-sha256": btoa("sixteen bytes!!!") },
    { ...h, "x-shopify-topic": "orders paid" },
    { ...h, "x-shopify-event-id": "id with spaces" },
  ],
  notEvents: [JSON.stringify([1]), JSON.stringify(7), "not json"],
  timestamped: false,
});

test("`verifyShopify()` keys an event by X-Shopify-Event-Id, not X-Shopify-Webhook-Id, and leaves it undated: X-Shopify-Triggered-At is not signed", async () => {
  const verify = async () =>
    shopifyProvider.verify({
      body: paid.body,
      headers: new Headers(await headers(paid.body, SECRETS[1])),
      secrets: SECRETS,
      toleranceSec: 300,
      nowMs: Date.now(),
    });
  const [first, retry] = [await verify(), await verify()];
  expect([first.id, retry.id]).toEqual([EVENT_ID, EVENT_ID]);
  expect(first.createdAt).toBeUndefined();
});

const order = (id: string, name: string, currency: string, total: string, eventId: string) => ({
  aggregate_type: "ShopifyOrder",
  aggregate_id: `gid://shopify/Order/${id}`,
  event_type: "ShopifyOrderPaid",
  payload: { name, order: `gid://shopify/Order/${id}`, currency, event_id: eventId, total_price: total },
});

providerDeliverySuite({
  provider: shopifyProvider,
  signer: "shopify",
  handlers: shopifyHandlers,
  secrets: SECRETS,
  fixtures,
  inbox: {
    "0f6d2b9a-3c41-4e8e-a0d7-91c5b2e4f8a3": "processed",
    "5c2f1e47-1a6b-4a0b-9c1f-5f7a7e6b3d21": "processed",
    "98880550-7158-44d4-b7cd-2c97c8a091b5": "ignored",
  },
  endState: outboxRows,
  unsignedIdHeader: "x-shopify-event-id",
  expected: [
    order("820982911946154508", "#9999", "USD", "403.00", EVENT_ID),
    order("820982911946154509", "#10000", "EUR", "59.50", "0f6d2b9a-3c41-4e8e-a0d7-91c5b2e4f8a3"),
  ],
  bad: (signed) => [
    { why: "tampered body", delivery: { ...signed, body: signed.body.replace("403.00", "0.01") }, code: "signature_mismatch" },
    {
      why: "another secret",
      delivery: { ...signed, headers: { ...signed.headers, "x-shopify-hmac-sha256": btoa("x".repeat(32)) } },
      code: "signature_mismatch",
    },
    {
      why: "no event id",
      delivery: {
        ...signed,
        headers: Object.fromEntries(Object.entries(signed.headers).filter(([k]) => k.toLowerCase() !== "x-shopify-event-id")),
      },
      code: "signature_missing",
    },
    { why: "signed body that is no object", delivery: { ...signed, body: "[]" }, code: "signature_mismatch" },
  ],
});

test("`recordOrderPaid()` books nothing for an orders/create body (pending) sent as topic orders/paid: the topic header is not signed", async () => {
  const app = createApp({
    db: fresh.db,
    endpoints: [{ name: "shop", provider: shopifyProvider, secrets: SECRETS, handlers: shopifyHandlers, mode: "sync" }],
    log: () => {},
  });
  const send = async (body: string, eventId: string) => {
    const res = await app.fetch(
      new Request("http://receiver.test/webhooks/shopify/shop", {
        method: "POST",
        headers: { "content-type": "application/json", ...(await headers(body, SECRETS[0])), "x-shopify-event-id": eventId },
        body,
      }),
    );
    return ((await res.json()) as { outcome: string }).outcome;
  };
  const created = fixtures.find((f) => f.name === "orders-create-1001.json")!;
  expect((JSON.parse(created.body) as { financial_status: string }).financial_status).toBe("pending");
  expect(await send(created.body, "forged-topic-1")).toBe("processed");
  expect(await outboxRows(fresh.db)).toEqual([]);
  // The order's own orders/paid books it, once, whichever event id carries it.
  expect(await send(paid.body, EVENT_ID)).toBe("processed");
  expect(await send(paid.body, "replayed-1")).toBe("processed");
  expect(await outboxRows(fresh.db)).toEqual([order("820982911946154508", "#9999", "USD", "403.00", EVENT_ID)]);
});
