// Retention is one contract (reviews of bf4a976 R5 and R11, of fcab188 R5): an inbox key is kept at least
// as long as its provider can send the event again (per provider, measured on received_at, the product's
// own clock), payloads may go sooner by weekly partition but never those of unsettled rows, and the
// inbox's companions (published outbox messages, change claims, finished backfill requests) go by age.
import { afterAll, beforeEach, expect, test } from "bun:test";
import { join } from "node:path";
import type { RunningFakeStripe } from "../../src/dev/fake-stripe/serve.ts";
import { readProviderFixtures, signDelivery } from "../../src/dev/provider-delivery.ts";
import { handlerTable } from "../../src/handlers/handler-table.ts";
import { keyFloorMs, purge, RetentionTooShortError } from "../../src/ops/purge.ts";
import { paddleProvider } from "../../src/providers/paddle.ts";
import { stripeApiEvent } from "../../src/providers/stripe.ts";
import { createApp } from "../../src/receiver/app.ts";
import { receiveAsync, receiveSync } from "../../src/receiver/receive.ts";
import { stripeHandlers } from "../../src/handlers/stripe-money.ts";
import { backdateInbox, count, eventBody, FIXTURES_DIR, freshDatabase, inboxRowsOf, readFixtures, verified } from "../support/helpers.ts";
import { workOff } from "../support/work.ts";
import { fakeWith, runBackfill } from "../reconcile/backfill-support.ts";

const fresh = await freshDatabase();
const db = fresh.db;
const fakes: RunningFakeStripe[] = [];
afterAll(async () => {
  await Promise.all(fakes.map((f) => f.stop()));
  await fresh.drop();
});
beforeEach(async () => {
  await db`truncate webhook_inbox, webhook_inbox_payloads, outbox, stripe_change_claims, event_backfill_requests, event_backfill_checkpoints`;
  await db`create table if not exists handler_runs (event_id text not null)`;
  await db`truncate handler_runs`;
});

const DAY_MS = 86_400_000;
const NOW_SEC = Math.floor(Date.now() / 1000);
/** A handler that is not idempotent on its own: every run adds a row, so a second run of one event shows. */
const counting = handlerTable({
  "thing.happened": async (tx, _object, context) => void (await tx`insert into handler_runs values (${context.eventId})`),
  "transaction.completed": async (tx, _object, context) => void (await tx`insert into handler_runs values (${context.eventId})`),
});
const stripeTarget = { provider: "stripe", endpoint: "billing", handlers: counting };

test("`purge()` refuses 4 days of key retention for Stripe rows (Stripe's retry horizon plus a day), which backfill's 30 days would re-read: a purged event would be applied again (review of bf4a976, R5)", async () => {
  // Received by webhook 5 days ago, as Stripe created it then.
  const created = NOW_SEC - 5 * 86_400;
  const event = { ...JSON.parse(eventBody("evt_r5", "thing.happened", { id: "obj_r5", object: "thing" })), created };
  expect(await receiveSync(db, stripeTarget, { ...stripeApiEvent(event), source: "webhook" })).toBe("processed");
  await backdateInbox(db, "evt_r5", 5 * DAY_MS);

  const refused = await purge(db, { olderThanMs: 4 * DAY_MS }).catch((err: unknown) => err);
  expect(refused).toBeInstanceOf(RetentionTooShortError);
  expect((refused as Error).message).toContain(
    "a key retention of 4 d is shorter than stripe's 31 d (it may send an event again for 30 d, plus a 1 d margin)",
  );
  expect(await purge(db, {})).toMatchObject({ deleted: 0, keyRetention: [{ provider: "stripe", olderThanMs: 31 * DAY_MS }] });

  // Catch-up re-reads the event from Stripe's Events API: a duplicate, its handler does not run again.
  const f = fakeWith([event]);
  fakes.push(f);
  const summary = await runBackfill(db, f, { target: stripeTarget, since: new Date((NOW_SEC - 30 * 86_400) * 1000) });
  expect(summary.outcomes.duplicate).toBe(1);
  expect(await count(db, "handler_runs")).toBe(1);
});

test("`purge()` measures a key's age from its arrival (received_at), not from the sender's creation time", async () => {
  const body = eventBody("evt_by_received", "thing.happened", { id: "obj_by_received", object: "thing" });
  expect(await receiveSync(db, stripeTarget, stripeApiEvent({ ...JSON.parse(body), created: NOW_SEC - 400 * 86_400 }))).toBe("processed");
  // Created a year ago (a fixture, a backfilled old event) but received now: kept.
  expect(await purge(db, {})).toMatchObject({ deleted: 0 });
  await backdateInbox(db, "evt_by_received", 30 * DAY_MS);
  expect(await purge(db, {})).toMatchObject({ deleted: 0 });
  await backdateInbox(db, "evt_by_received", 32 * DAY_MS);
  expect(await purge(db, {})).toMatchObject({ deleted: 1 });
});

test("the README walkthrough's fixtures (events dated a year before), delivered now, lose nothing to the default purge: keys and payloads stay 31 days from delivery", async () => {
  const target = { provider: "stripe", endpoint: "billing", handlers: stripeHandlers };
  const fixtures = [...readFixtures("stripe/invoice-lifecycle"), ...readFixtures("stripe/money-out")];
  const created = fixtures.map((f) => (JSON.parse(f.body) as { created: number }).created);
  expect(Math.max(...created)).toBeLessThan(NOW_SEC - 300 * 86_400); // the walkthrough's events are old
  for (const f of fixtures) await receiveSync(db, target, verified(f.body));
  const rows = await count(db, "webhook_inbox");
  expect(rows).toBe(fixtures.length);
  const dry = await purge(db, { dryRun: true });
  expect(dry).toMatchObject({ deleted: 0, payloadsDropped: 0, partitionsDropped: [] });
  expect(await purge(db, {})).toMatchObject({ deleted: 0, payloadsDropped: 0 });
  expect(await count(db, "webhook_inbox_payloads")).toBe(rows);
  // Delivered again, each is still a duplicate: nothing is applied twice.
  for (const f of fixtures) expect(await receiveSync(db, target, verified(f.body))).toBe("duplicate");
});

/** Paddle's 02-transaction.completed fixture, signed as Paddle signs it, posted to a sync Paddle endpoint. */
async function deliverPaddle(app: ReturnType<typeof createApp>, secret: string) {
  const [fixture] = readProviderFixtures([join(FIXTURES_DIR, "paddle", "02-transaction.completed.json")]);
  const signed = await signDelivery("paddle", fixture!, secret, Math.floor(Date.now() / 1000));
  const res = await app.fetch(
    new Request("http://receiver.test/webhooks/paddle/billing", { method: "POST", headers: signed.headers, body: signed.body }),
  );
  return { status: res.status, body: (await res.json()) as { outcome: string; event_id: string } };
}

test("a Paddle replay 40 days after its event, after the default purge, is a duplicate: Paddle's key is kept 91 days, its payload went with its week (review of fcab188, R5)", async () => {
  const secret = "pdl_ntfset_01gkpjp8bkm3tm53kdgkx6sms7_6h3qd3uFSi9YCD3OLYAShQI90XTI5vEI";
  const app = createApp({
    db,
    endpoints: [{ name: "billing", provider: paddleProvider, secrets: [secret], handlers: counting, mode: "sync" }],
    log: () => {},
  });
  const first = await deliverPaddle(app, secret);
  expect(first).toMatchObject({ status: 200, body: { outcome: "processed" } });
  await backdateInbox(db, first.body.event_id, 40 * DAY_MS);

  const purged = await purge(db, {});
  expect(purged.keyRetention).toEqual([{ provider: "paddle", olderThanMs: 91 * DAY_MS }]);
  expect(purged).toMatchObject({ deleted: 0, payloadsDropped: 1 });
  const [row] = await inboxRowsOf(db, first.body.event_id);
  expect(row).toMatchObject({ outcome: "processed", payload_dropped: true });

  // Paddle's "Replay a notification": a new notification, the same event_id, signed afresh.
  expect(await deliverPaddle(app, secret)).toMatchObject({ status: 200, body: { outcome: "duplicate" } });
  expect(await count(db, "handler_runs")).toBe(1);
  expect(await count(db, "webhook_inbox")).toBe(1);
});

test("`purge()` refuses a key retention below a provider's resend window, naming each provider that has rows and its window, unless `force`", async () => {
  const secret = "pdl_ntfset_01gkpjp8bkm3tm53kdgkx6sms7_6h3qd3uFSi9YCD3OLYAShQI90XTI5vEI";
  const app = createApp({
    db,
    endpoints: [{ name: "billing", provider: paddleProvider, secrets: [secret], handlers: counting, mode: "sync" }],
    log: () => {},
  });
  expect((await deliverPaddle(app, secret)).status).toBe(200);
  expect(
    await receiveSync(db, stripeTarget, stripeApiEvent(JSON.parse(eventBody("evt_floor", "thing.happened", { id: "o", object: "thing" })))),
  ).toBe("processed");
  await backdateInbox(db, ["evt_floor", "evt_01hv8x2acma2gz9y0pn2qtvmbb"], 40 * DAY_MS);

  expect(keyFloorMs("paddle")).toBe(91 * DAY_MS);
  expect(keyFloorMs("github")).toBe(4 * DAY_MS);
  expect(keyFloorMs("a-provider-nobody-registered")).toBe(91 * DAY_MS);
  const refused = (await purge(db, { olderThanMs: 35 * DAY_MS }).catch((err: unknown) => err)) as Error;
  expect(refused).toBeInstanceOf(RetentionTooShortError);
  expect(refused.message).toBe(
    "Cannot purge: a key retention of 35 d is shorter than paddle's 91 d (it may send an event again for 90 d, plus a 1 d margin); " +
      "an event met after its key is gone would be applied again. Use --force to override.",
  );
  expect(await count(db, "webhook_inbox")).toBe(2);
  const dry = await purge(db, { olderThanMs: 35 * DAY_MS, dryRun: true });
  expect(dry).toMatchObject({ dryRun: true, deleted: 2, forceRequired: expect.stringContaining("paddle's 91 d") });
  expect(await purge(db, { olderThanMs: 35 * DAY_MS, force: true })).toMatchObject({ deleted: 2 });
  expect(await count(db, "webhook_inbox")).toBe(0);
});

test("`purge()` drops a payload partition past the horizon but keeps the payloads of its unsettled rows, which the worker then applies once", async () => {
  const queued = { provider: "stripe", endpoint: "billing", handlers: counting };
  for (const id of ["evt_kept_open", "evt_kept_done"])
    expect(
      await receiveAsync(db, queued, stripeApiEvent(JSON.parse(eventBody(id, "thing.happened", { id: `obj_${id}`, object: "thing" })))),
    ).toBe("queued");
  await db`update webhook_inbox set processed_at = now(), outcome = 'processed' where event_id = 'evt_kept_done'`;
  // Into a weekly partition 20 days back (an earlier test's purge dropped the older ones, whose range is now the default partition's).
  await backdateInbox(db, ["evt_kept_open", "evt_kept_done"], 20 * DAY_MS);

  const result = await purge(db, { payloadsOlderThanMs: 7 * DAY_MS });
  expect(result).toMatchObject({ deleted: 0, payloadsDropped: 1, openPayloadsMoved: 1 });
  expect(result.partitionsDropped.length).toBeGreaterThan(0);
  const [open] = await inboxRowsOf(db, "evt_kept_open");
  expect(open).toMatchObject({ processed_at: null, payload_dropped: false, payload: { id: "evt_kept_open" } });
  expect((await db`select tableoid::regclass::text as p from webhook_inbox_payloads where event_id = 'evt_kept_open'`)[0]?.p).toBe(
    "webhook_inbox_payloads_default",
  );

  // Its row finds its payload in the default partition: applied once; a second purge then deletes that payload by batch.
  expect((await workOff(db, counting, { tables: { stripe: counting } })).map((w) => w.outcome)).toEqual(["processed"]);
  expect(await count(db, "handler_runs")).toBe(1);
  expect(await purge(db, { payloadsOlderThanMs: 7 * DAY_MS })).toMatchObject({ payloadsDropped: 1, partitionsDropped: [] });
  expect(await count(db, "webhook_inbox_payloads")).toBe(0);
  expect(await count(db, "webhook_inbox")).toBe(2);
});

test("`purge()` deletes published outbox messages, change claims and finished backfill requests past the retention, and keeps the rest (review R11)", async () => {
  await db`
    insert into outbox (aggregate_type, aggregate_id, event_type, payload, published_at, created_at) values
      ('Invoice', 'in_old_published', 'InvoicePaymentBooked', '{}', now() - interval '40 days', now() - interval '40 days'),
      ('Invoice', 'in_recent_published', 'InvoicePaymentBooked', '{}', now() - interval '2 days', now() - interval '2 days'),
      ('Invoice', 'in_old_unpublished', 'InvoicePaymentBooked', '{}', null, now() - interval '40 days')`;
  await db`
    insert into stripe_change_claims (change_id, provider, endpoint, event_id, claimed_at) values
      ('evt_old_change', 'stripe', 'billing', 'evt_old_change', now() - interval '40 days'),
      ('evt_recent_change', 'stripe', 'billing', 'evt_recent_change', now() - interval '2 days')`;
  await db`
    insert into event_backfill_requests (endpoint, requested_by, window_start, window_end, requested_at, finished_at) values
      ('thin', 'evt_old_done', now() - interval '41 days', now() - interval '40 days', now() - interval '40 days', now() - interval '40 days'),
      ('thin', 'evt_old_open', now() - interval '41 days', now() - interval '40 days', now() - interval '40 days', null),
      ('thin', 'evt_recent_done', now() - interval '3 days', now() - interval '2 days', now() - interval '2 days', now() - interval '2 days')`;
  const dry = await purge(db, { olderThanMs: 31 * DAY_MS, dryRun: true });
  expect(dry).toMatchObject({ outboxDeleted: 1, claimsDeleted: 1, backfillRequestsDeleted: 1 });
  expect(await count(db, "outbox")).toBe(3);
  expect(await purge(db, { olderThanMs: 31 * DAY_MS, batchSize: 1 })).toMatchObject({
    outboxDeleted: 1,
    claimsDeleted: 1,
    backfillRequestsDeleted: 1,
  });
  expect((await db`select aggregate_id from outbox order by aggregate_id`).map((r) => r.aggregate_id)).toEqual([
    "in_old_unpublished",
    "in_recent_published",
  ]);
  expect((await db`select change_id from stripe_change_claims`).map((r) => r.change_id)).toEqual(["evt_recent_change"]);
  expect((await db`select requested_by from event_backfill_requests order by requested_by`).map((r) => r.requested_by)).toEqual([
    "evt_old_open",
    "evt_recent_done",
  ]);
});
