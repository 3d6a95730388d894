// Retention is one contract (review of bf4a976, R5 and R11): purge refuses less than the longest horizon
// the product re-reads, measured on the event's own creation time, and the inbox's companions (published
// outbox messages, change claims, finished backfill requests) go with the rows.
import { afterAll, beforeEach, expect, test } from "bun:test";
import type { RunningFakeStripe } from "../../src/dev/fake-stripe/serve.ts";
import { handlerTable } from "../../src/handlers/handler-table.ts";
import { purge, RetentionTooShortError } from "../../src/ops/purge.ts";
import { stripeApiEvent } from "../../src/providers/stripe.ts";
import { receiveSync } from "../../src/receiver/receive.ts";
import { count, eventBody, freshDatabase } from "../support/helpers.ts";
import { fakeWith, runBackfill } from "../reconcile/backfill-support.ts";

const fresh = await freshDatabase();
const db = fresh.db;
const fakes: RunningFakeStripe[] = [];
afterAll(async () => {
  await Promise.all(fakes.map((f) => f.stop()));
  await fresh.drop();
});
beforeEach(async () => {
  await db`truncate webhook_inbox, outbox, stripe_change_claims, event_backfill_requests, event_backfill_checkpoints`;
  await db`create table if not exists handler_runs (event_id text not null)`;
  await db`truncate handler_runs`;
});

const DAY_MS = 86_400_000;
const NOW_SEC = Math.floor(Date.now() / 1000);
/** A handler that is not idempotent on its own: every run adds a row, so a second run of one event shows. */
const counting = handlerTable({
  "thing.happened": async (tx, _object, context) => void (await tx`insert into handler_runs values (${context.eventId})`),
});

test("`purge()` refuses 4 days of retention (Stripe's retry horizon plus a day), which backfill's 30 days would re-read: a purged event would be applied again (review R5)", async () => {
  // Received by webhook 5 days ago, as Stripe created it then.
  const created = NOW_SEC - 5 * 86_400;
  const event = { ...JSON.parse(eventBody("evt_r5", "thing.happened", { id: "obj_r5", object: "thing" })), created };
  const target = { provider: "stripe", endpoint: "billing", handlers: counting };
  expect(await receiveSync(db, target, { ...stripeApiEvent(event), source: "webhook" })).toBe("processed");
  await db`update webhook_inbox set received_at = to_timestamp(${created}), processed_at = to_timestamp(${created})`;

  const refused = await purge(db, { olderThanMs: 4 * DAY_MS }).catch((err: unknown) => err);
  expect(refused).toBeInstanceOf(RetentionTooShortError);
  expect(await purge(db, { olderThanMs: 31 * DAY_MS })).toMatchObject({ deleted: 0 });

  // Catch-up re-reads the event from Stripe's Events API: a duplicate, its handler does not run again.
  const f = fakeWith([event]);
  fakes.push(f);
  const summary = await runBackfill(db, f, { target, since: new Date((NOW_SEC - 30 * 86_400) * 1000) });
  expect(summary.outcomes.duplicate).toBe(1);
  expect(await count(db, "handler_runs")).toBe(1);
});

test("`purge()` keeps a settled row while its event is younger than the retention, however long ago it was processed, and deletes it by its event's age", async () => {
  const target = { provider: "stripe", endpoint: "billing", handlers: counting };
  const body = eventBody("evt_by_created", "thing.happened", { id: "obj_by_created", object: "thing" });
  expect(await receiveSync(db, target, stripeApiEvent(JSON.parse(body)))).toBe("processed");
  await db`update webhook_inbox set event_created_at = now() - interval '20 days', processed_at = now() - interval '40 days'`;
  expect(await purge(db, { olderThanMs: 31 * DAY_MS })).toMatchObject({ deleted: 0 });
  await db`update webhook_inbox set event_created_at = now() - interval '32 days'`;
  expect(await purge(db, { olderThanMs: 31 * DAY_MS })).toMatchObject({ deleted: 1 });
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
