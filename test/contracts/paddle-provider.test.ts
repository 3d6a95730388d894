// Paddle Billing through the provider contract suite and the delivery contract, with test/fixtures/paddle/.
import { join } from "node:path";
import { expect, test } from "bun:test";
import { readProviderFixtures } from "../../src/dev/provider-delivery.ts";
import { paddleHandlers } from "../../src/handlers/paddle-transactions.ts";
import { paddleProvider, signPaddlePayload } from "../../src/providers/paddle.ts";
import { FIXTURES_DIR } from "../support/helpers.ts";
import { outboxRows, providerDeliverySuite } from "./provider-delivery-suite.ts";
import { providerContractSuite } from "./provider-suite.ts";

const SECRETS = [
  "pdl_ntfset_01gkpjp8bkm3tm53kdgkx6sms7_6h3qd3uFSi9YCD3OLYAShQI90XTI5vEI",
  "pdl_ntfset_01gkpjp8bkm3tm53kdgkx6sms7_Xq2r8TzPbL0mN4vK6yW1cD9fG3hJ5sAa",
] as const;
const fixtures = readProviderFixtures([join(FIXTURES_DIR, "paddle")]);
const completed = fixtures.find((f) => f.name === "02-transaction.completed.json")!;
const completedData = (JSON.parse(completed.body) as { data: Record<string, unknown> }).data;

providerContractSuite({
  provider: paddleProvider,
  sign: async (body, secret, ts) => ({ "paddle-signature": await signPaddlePayload(body, secret, ts) }),
  secrets: SECRETS,
  sample: {
    body: completed.body,
    id: "evt_01hv8x2acma2gz9y0pn2qtvmbb",
    type: "transaction.completed",
    subject: { object: completedData, key: "txn_01hv8wptq8987qeep44cyrewp9" },
  },
  requiredHeaders: ["paddle-signature"],
  malformed: (h) => [
    { "paddle-signature": h["paddle-signature"]!.replace("ts=", "ts=x") },
    { "paddle-signature": h["paddle-signature"]!.replace(/;h1=.*/, "") },
    { "paddle-signature": `${h["paddle-signature"]};ts=1` },
    { "paddle-signature": h["paddle-signature"]!.replace("h1=", "h1=zz") },
  ],
  notEvents: [
    JSON.stringify({ event_type: "x", data: {} }),
    JSON.stringify({ event_id: "evt_1", data: {} }),
    JSON.stringify({ event_id: "evt_1", event_type: "x", data: [1] }),
    "not json",
  ],
  withoutSubject: { event_id: "evt_1", event_type: "transaction.completed" },
});

test("`verifyPaddle()` accepts a header with several h1 (Paddle rotating its secret) when any matches, and reads occurred_at", async () => {
  const ts = Math.floor(Date.now() / 1000);
  const real = await signPaddlePayload(completed.body, SECRETS[1], ts);
  const header = `ts=${ts};h1=${"0".repeat(64)};${real.split(";")[1]}`;
  const event = await paddleProvider.verify({
    body: completed.body,
    headers: new Headers({ "paddle-signature": header }),
    secrets: SECRETS,
    toleranceSec: 5,
    nowMs: Date.now(),
  });
  expect({ id: event.id, createdAt: event.createdAt?.toISOString() }).toEqual({
    id: "evt_01hv8x2acma2gz9y0pn2qtvmbb",
    createdAt: "2024-04-12T10:25:21.427Z",
  });
  expect(paddleProvider.toleranceSec).toBe(60);
});

providerDeliverySuite({
  provider: paddleProvider,
  signer: "paddle",
  handlers: paddleHandlers,
  secrets: SECRETS,
  fixtures,
  inbox: {
    evt_01hv8wptq8987qeep44cyrewp9: "ignored",
    evt_01hv8x2a8z8d3zqjbmdtg6kbxe: "ignored",
    evt_01hv8x2acma2gz9y0pn2qtvmbb: "processed",
    evt_01hv9a7k2e5b3c0d8f1g6h4j9k: "processed",
  },
  endState: outboxRows,
  expected: [
    {
      aggregate_type: "PaddleTransaction",
      aggregate_id: "txn_01hv8wptq8987qeep44cyrewp9",
      event_type: "PaddleTransactionBooked",
      payload: {
        currency: "USD",
        customer: "ctm_01hv6y1jedq4p1n0yqn5ba3ky4",
        event_id: "evt_01hv8x2acma2gz9y0pn2qtvmbb",
        grand_total: 32550,
        transaction: "txn_01hv8wptq8987qeep44cyrewp9",
      },
    },
    {
      aggregate_type: "PaddleTransaction",
      aggregate_id: "txn_01hv9a6z4x8c2v6b0n3m5q7w1e",
      event_type: "PaddleTransactionBooked",
      payload: {
        currency: "EUR",
        customer: "ctm_01hv9a5y3t7r1e9w4q2z6x8c0v",
        event_id: "evt_01hv9a7k2e5b3c0d8f1g6h4j9k",
        grand_total: 5831,
        transaction: "txn_01hv9a6z4x8c2v6b0n3m5q7w1e",
      },
    },
  ],
  bad: (signed) => {
    const header = signed.headers["paddle-signature"] as string;
    const stale = header.replace(/ts=(\d+)/, (_, ts: string) => `ts=${Number(ts) - 61}`);
    return [
      { why: "tampered body", delivery: { ...signed, body: signed.body.replace("ready", "paid!") }, code: "signature_mismatch" },
      {
        why: "ts moved (signature no longer matches, and past the tolerance)",
        delivery: { ...signed, headers: { ...signed.headers, "paddle-signature": stale } },
        code: "timestamp_out_of_tolerance",
      },
      {
        why: "no header",
        delivery: { ...signed, headers: { "content-type": "application/json" } as Record<string, string> },
        code: "signature_missing",
      },
    ];
  },
});
