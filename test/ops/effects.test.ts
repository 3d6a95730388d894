// eventEffects() and activityPerMinute() on real rows.
import { afterAll, beforeAll, expect, test } from "bun:test";
import type { Db } from "../../src/db/db.ts";
import { activityPerMinute } from "../../src/ops/activity.ts";
import { eventEffects } from "../../src/ops/effects.ts";
import { recordIgnoredMode, receiveSync } from "../../src/receiver/receive.ts";
import { handlersFor } from "../../src/receiver/endpoints.ts";
import { insertInbox } from "../../src/inbox/inbox.ts";
import { eventBody, freshDatabase, inboxRowFor, invoice, lifecycle, verified } from "../support/helpers.ts";

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

test("`eventEffects()` of a connected account's event names its account's invoice only, not another account's of the same id", async () => {
  // One invoice id under two connected accounts (fresh-user trial N4): two invoices.
  await db`
    insert into invoices (account, id, customer_id, status, currency, amount_due, amount_paid)
    values ('acct_1Z', 'in_conn_same', 'cus_z', 'paid', 'usd', 2000, 2000), ('acct_1Y', 'in_conn_same', 'cus_y', 'paid', 'usd', 7777, 7777)
  `;
  const body = eventBody("evt_conn_z", "invoice.paid", invoice({ id: "in_conn_same", customer: "cus_z" }));
  const key = { provider: "stripe", endpoint: "connect", eventId: "evt_conn_z" };
  await insertInbox(db, [inboxRowFor(key, { type: "invoice.paid", payload: body, account: "acct_1Z", settled: "processed" })]);
  const effects = await eventEffects(db, "evt_conn_z");
  expect(effects.invoices.map((i) => [i.account, i.id, i.customerId, i.amountPaid])).toEqual([
    ["acct_1Z", "in_conn_same", "cus_z", "2000"],
  ]);
});

test("`activityPerMinute()` counts this hour's rows per minute by state, events of the other mode (`ignored_mode`) included", async () => {
  const rows = await activityPerMinute(db);
  const billing = rows.filter((r) => r.endpoint === "billing");
  const total = billing.reduce((n, r) => n + r.processed + r.ignored + r.resolved + r.unprocessed + r.needsReview + r.ignoredMode, 0);
  expect(total).toBe(lifecycle().length);
  expect(rows.filter((r) => r.endpoint === "livee").map((r) => [r.ignoredMode, r.processed + r.ignored])).toEqual([[1, 0]]);
});
