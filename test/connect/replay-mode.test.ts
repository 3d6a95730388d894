// The recovery after a wrong STRIPE_MODE: events answered `ignored_mode` (never applied, never retried by
// Stripe) are applied by `replayEvent()` once the endpoint's mode is set to theirs, and only then
// (src/ops/replay.ts, src/inbox/apply-event.ts `modeFixed`).
import { afterAll, expect, test } from "bun:test";
import { billingHandlers } from "../../src/handlers/billing.ts";
import { replayEvent } from "../../src/ops/replay.ts";
import { createApp } from "../../src/receiver/app.ts";
import { stripeEndpoints } from "../../src/receiver/endpoints.ts";
import { count, eventBody, freshDatabase, invoice, SECRET, signedRequest } from "../support/helpers.ts";

const fresh = await freshDatabase();
const db = fresh.db;
afterAll(() => fresh.drop());

test("`replayEvent()` applies an `ignored_mode` event once the endpoint's mode is the event's, refuses it before, and books it once", async () => {
  // A test-mode account whose endpoint was set to live by mistake.
  const app = createApp({ db, log: () => {}, endpoints: stripeEndpoints([{ name: "billing", secrets: [SECRET], mode: "sync", livemode: true }]) });
  const event = JSON.parse(eventBody("evt_mode_1", "invoice.paid", invoice({ id: "in_mode_1", status: "paid", amount_paid: 2000 })));
  event.livemode = false;
  const body = JSON.stringify(event, null, 2);
  const response = await app.fetch(await signedRequest("http://receiver.test/webhooks/stripe/billing", body));
  expect(await response.json()).toMatchObject({ outcome: "ignored_mode" });
  const key = { provider: "stripe", endpoint: "billing", eventId: "evt_mode_1" };

  // Still configured live (or not set): refused, naming the fix.
  await expect(replayEvent(db, key, billingHandlers, true)).rejects.toThrow("set it to the event's mode and replay it again");
  await expect(replayEvent(db, key, billingHandlers)).rejects.toThrow("recorded ignored_mode");
  expect(await count(db, "ledger_entries")).toBe(0);

  // The endpoint's mode fixed to test: applied once, the row now processed; again: nothing more.
  const applied = await replayEvent(db, key, billingHandlers, false);
  expect(applied.handled).toBe(true);
  expect(await count(db, "ledger_entries", "invoice_id = 'in_mode_1' and kind = 'payment'")).toBe(1);
  expect(await db`select outcome from webhook_inbox where event_id = 'evt_mode_1'`).toEqual([{ outcome: "processed" }] as never);
  await replayEvent(db, key, billingHandlers, false);
  expect(await count(db, "ledger_entries")).toBe(1);
});
