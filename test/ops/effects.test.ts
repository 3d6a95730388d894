// eventEffects() and activityPerMinute() on real rows.
import { afterAll, beforeAll, expect, test } from "bun:test";
import type { Db } from "../../src/db/db.ts";
import { activityPerMinute } from "../../src/ops/activity.ts";
import { eventEffects } from "../../src/ops/effects.ts";
import { recordIgnoredMode, receiveSync } from "../../src/receiver/receive.ts";
import { handlersFor } from "../../src/receiver/endpoints.ts";
import { eventBody, freshDatabase, invoice, lifecycle, verified } from "../support/helpers.ts";

let database: Awaited<ReturnType<typeof freshDatabase>>;
let db: Db;

beforeAll(async () => {
  database = await freshDatabase();
  db = database.db;
  const target = { provider: "stripe", endpoint: "billing", handlers: handlersFor("stripe")! };
  for (const f of lifecycle()) await receiveSync(db, target, verified(f.body), 10_000);
  // An event of the other mode at a live endpoint: recorded ignored_mode (the fresh-user trial's overview count).
  await recordIgnoredMode(db, { provider: "stripe", endpoint: "livee" }, verified(eventBody("evt_other_mode", "invoice.paid", invoice())));
});

afterAll(() => database?.drop());

test("`eventEffects()` returns the invoice, ledger entry and outbox message a paid event booked", async () => {
  const effects = await eventEffects(db, "evt_1SkB1cLgUG5tbmjc0paidxx");
  expect(effects.ledgerEntries.map((l) => l.kind)).toEqual(["payment"]);
  expect(effects.outbox.map((o) => o.eventType)).toEqual(["InvoicePaymentBooked"]);
  expect(effects.invoices.map((i) => i.id)).toEqual([effects.ledgerEntries[0]!.invoiceId]);
  expect(effects.invoices[0]?.status).toBe("paid");
});

test("`eventEffects()` names the invoice of an event that booked nothing, and nothing for an unknown id", async () => {
  const created = await eventEffects(db, "evt_1SkB1aLgUG5tbmjc0created");
  expect(created.ledgerEntries).toEqual([]);
  expect(created.invoices).toHaveLength(1);
  expect(await eventEffects(db, "evt_unknown")).toEqual({ invoices: [], ledgerEntries: [], outbox: [] });
});

test("`activityPerMinute()` counts this hour's rows per minute by state, events of the other mode (`ignored_mode`) included", async () => {
  const rows = await activityPerMinute(db);
  const billing = rows.filter((r) => r.endpoint === "billing");
  const total = billing.reduce((n, r) => n + r.processed + r.ignored + r.resolved + r.unprocessed + r.needsReview + r.ignoredMode, 0);
  expect(total).toBe(lifecycle().length);
  expect(rows.filter((r) => r.endpoint === "livee").map((r) => [r.ignoredMode, r.processed + r.ignored])).toEqual([[1, 0]]);
});
