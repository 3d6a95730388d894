// The Standard Webhooks provider through the provider contract suite, signed by the `standardwebhooks`
// package, then received by createApp and applied by the worker: the seam a second provider plugs into.
import { afterAll, beforeEach, expect, test } from "bun:test";
import { Webhook } from "standardwebhooks";
import type { HandlerTable } from "../../src/handlers/handler-table.ts";
import { insertInbox } from "../../src/inbox/inbox.ts";
import { standardWebhooksProvider } from "../../src/providers/standard-webhooks.ts";
import { createApp } from "../../src/receiver/app.ts";
import { workOff } from "../support/work.ts";
import { freshDatabase, inboxRowFor } from "../support/helpers.ts";
import { providerContractSuite } from "./provider-suite.ts";

const MSG_ID = "msg_2SuiteStandardWebhooks";
const SECRETS = [`whsec_${btoa("suite-secret-one-32-bytes-long!!")}`, `whsec_${btoa("suite-secret-two-32-bytes-long!!")}`] as const;

/** The headers a Standard Webhooks sender attaches to `body` (webhook-id `id`). */
function signHeaders(body: string, secret: string, timestampSec: number, id = MSG_ID): Record<string, string> {
  return {
    "webhook-id": id,
    "webhook-timestamp": String(timestampSec),
    "webhook-signature": new Webhook(secret).sign(id, new Date(timestampSec * 1000), body),
  };
}

const data = { id: "sub_suite_1", object: "subscription", plan: "pro" };
const body = JSON.stringify({ type: "subscription.renewed", timestamp: "2025-11-30T00:12:00Z", data });

providerContractSuite({
  provider: standardWebhooksProvider,
  sign: async (payload, secret, timestamp) => signHeaders(payload, secret, timestamp),
  secrets: SECRETS,
  sample: { body, id: MSG_ID, type: "subscription.renewed", subject: { object: data, key: "sub_suite_1" } },
  requiredHeaders: ["webhook-id", "webhook-timestamp", "webhook-signature"],
  malformed: (headers) => [
    { ...headers, "webhook-timestamp": `${headers["webhook-timestamp"]}abc` },
    { ...headers, "webhook-signature": headers["webhook-signature"]!.replace("v1,", "v2,") },
    { ...headers, "webhook-id": "msg with spaces" },
  ],
  notEvents: [
    JSON.stringify({ type: "x" }),
    JSON.stringify({ type: "x", data: [1] }),
    JSON.stringify({ data: {} }),
    JSON.stringify("text"),
    "not json",
  ],
  withoutSubject: { type: "subscription.renewed", data: null },
});

test("`verifyStandardWebhook()` accepts a matching v1 entry among others in webhook-signature, as the spec allows", async () => {
  const headers = signHeaders(body, SECRETS[1], 1_764_461_520);
  headers["webhook-signature"] = `v1a,c2lnbmVk v1,${btoa("not the signature")} ${headers["webhook-signature"]}`;
  const event = await standardWebhooksProvider.verify({
    body,
    headers: new Headers(headers),
    secrets: SECRETS,
    toleranceSec: 300,
    nowMs: 1_764_461_520_000,
  });
  expect({ id: event.id, key: event.subject.key }).toEqual({ id: MSG_ID, key: "sub_suite_1" });
});

const fresh = await freshDatabase();
const db = fresh.db;
afterAll(() => fresh.drop());
beforeEach(async () => {
  await db`truncate webhook_inbox, webhook_inbox_payloads, outbox, ledger_entries, invoices`;
});

/** A handler table that books the subject's id as an invoice row, so what the handler saw is visible. */
const renewals: HandlerTable = {
  "subscription.renewed": async (tx, object, context) => {
    await tx`insert into invoices (id, customer_id, status, currency, amount_due) values (${String(object.id)}, ${context.provider}, 'open', 'usd', 0)`;
  },
};

function app(mode: "sync" | "async") {
  return createApp({
    db,
    endpoints: [{ name: "renewals", provider: standardWebhooksProvider, secrets: SECRETS, handlers: renewals, isDefault: true, mode }],
    log: () => {},
  });
}

function deliver(mode: "sync" | "async", id: string, payload = body): Promise<Response> {
  const headers = signHeaders(payload, SECRETS[0], Math.floor(Date.now() / 1000), id);
  return app(mode).fetch(new Request("http://receiver.test/webhooks/standard-webhooks", { method: "POST", headers, body: payload }));
}

test("`createApp()` records a Standard Webhooks event under provider standard-webhooks and applies its subject in sync mode", async () => {
  const res = await deliver("sync", "msg_sync_1");
  expect(await res.json()).toEqual({ outcome: "processed", event_id: "msg_sync_1" });
  expect((await deliver("sync", "msg_sync_1")).status).toBe(200);
  expect(await db`select provider, endpoint, event_id, event_type, outcome from webhook_inbox`).toEqual([
    {
      provider: "standard-webhooks",
      endpoint: "renewals",
      event_id: "msg_sync_1",
      event_type: "subscription.renewed",
      outcome: "processed",
    },
  ] as never);
  expect(await db`select id, customer_id from invoices`).toEqual([{ id: "sub_suite_1", customer_id: "standard-webhooks" }] as never);
});

test("`processClaim()` applies queued Standard Webhooks rows through the registry's subject, and parks a row of an unregistered provider", async () => {
  const second = JSON.stringify({ type: "subscription.renewed", timestamp: "2025-11-30T00:12:00Z", data: { id: "sub_suite_2" } });
  expect(await (await deliver("async", "msg_async_1")).json()).toEqual({ outcome: "queued", event_id: "msg_async_1" });
  expect(await (await deliver("async", "msg_async_2", second)).json()).toEqual({ outcome: "queued", event_id: "msg_async_2" });
  // A queued row (state and payload rows, as any delivery writes them) of a provider no worker table has.
  const acme = await insertInbox(db, [
    inboxRowFor(
      { provider: "acme", endpoint: "renewals", eventId: "acme_1" },
      { type: "subscription.renewed", payload: JSON.stringify({ type: "subscription.renewed", data: { id: "sub_acme" } }) },
    ),
  ]);
  expect(acme.size).toBe(1);
  const results = await workOff(db, renewals, { tables: { "standard-webhooks": renewals } });
  expect(Object.fromEntries(results.map((r) => [r.claim.eventId, r.outcome]))).toEqual({
    msg_async_1: "processed",
    msg_async_2: "processed",
    acme_1: "needs_review",
  });
  expect((await db`select id from invoices order by id`).map((r) => r.id)).toEqual(["sub_suite_1", "sub_suite_2"]);
  const [parked] =
    await db`select last_error, needs_review_at is not null as parked, processed_at from webhook_inbox where provider = 'acme'`;
  expect(parked).toMatchObject({ parked: true, processed_at: null });
  expect(String(parked?.last_error)).toContain("No handler table for provider acme");
});
