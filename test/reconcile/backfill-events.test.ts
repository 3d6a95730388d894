// Event backfill against the fake Stripe API (through stripe-node) and a real PostgreSQL.
import { afterAll, beforeEach, expect, setDefaultTimeout, test } from "bun:test";

setDefaultTimeout(60_000);
import type { Db } from "../../src/db/db.ts";
import type { RunningFakeStripe } from "../../src/dev/fake-stripe/serve.ts";
import { stripeApiEvent } from "../../src/providers/stripe.ts";
import { handlerTable } from "../../src/handlers/handler-table.ts";
import { handlersFor } from "../../src/receiver/endpoints.ts";
import { receiveSync } from "../../src/receiver/receive.ts";
import { closeAll, connections, freshDatabase } from "../support/helpers.ts";
import { endState, fakeWith, recentEvents, runBackfill } from "./backfill-support.ts";

const NOW = Math.floor(Date.now() / 1000);
const events = recentEvents(NOW - 3_600);
const fakes: RunningFakeStripe[] = [];
let database: Awaited<ReturnType<typeof freshDatabase>>;
let db: Db;

beforeEach(async () => {
  await database?.drop();
  database = await freshDatabase();
  db = database.db;
});
afterAll(async () => {
  await database?.drop();
  await Promise.all(fakes.map((f) => f.stop()));
});

function fake(list = events, delivered = false) {
  const f = fakeWith(list, delivered);
  fakes.push(f);
  return f;
}

/** The end state of the same events delivered once each by webhook, in order: what backfill must equal. */
async function webhookEndState() {
  const other = await freshDatabase();
  const target = { provider: "stripe", endpoint: "billing", handlers: handlersFor("stripe")! };
  for (const e of events) await receiveSync(other.db, target, { ...stripeApiEvent(e), source: "webhook" });
  const state = await endState(other.db);
  await other.drop();
  return state;
}

test("`backfillEvents()` records every event after the receiver was down for the whole lifecycle, as webhooks would have, with source api", async () => {
  const f = fake();
  const summary = await runBackfill(db, f, { pageSize: 5 });
  expect(summary.status).toBe("done");
  expect(summary.events).toBe(events.length);
  expect(summary.fresh).toBe(events.length);
  expect(summary.unrecoverable).toBeNull();
  const rows = await db`select event_id, source, processed_at is not null as settled from webhook_inbox where endpoint = 'billing'`;
  expect(rows.length).toBe(events.length);
  expect(rows.every((r) => r.source === "api" && r.settled)).toBe(true);
  expect(await endState(db)).toEqual(await webhookEndState());
  // Oldest first, paged from a cursor: every list call is bounded and pages toward newer events.
  const calls = f.store.requests.filter((r) => r.path === "/v1/events");
  expect(calls.every((r) => Number(r.query.limit) <= 100)).toBe(true);
  expect(calls.some((r) => r.query.ending_before !== undefined)).toBe(true);
  const [cp] = await db`select cursor_event_id, covered_until, lease_owner from event_backfill_checkpoints`;
  expect(cp!.cursor_event_id).toBe(events.at(-1)!.id);
  expect(cp!.lease_owner).toBeNull();
  expect(Math.abs((cp!.covered_until as Date).getTime() / 1000 - NOW)).toBeLessThan(120);
});

test("`backfillEvents()` run again from its checkpoint re-reads only its overlap window, records only newer events and changes no row", async () => {
  const f = fake(events.slice(0, 20));
  await runBackfill(db, f, { pageSize: 4 });
  const before = await endState(db);
  const again = await runBackfill(db, f, { pageSize: 4 });
  // The 20 events lie within OVERLAP_SEC of the newest one: read again, all already recorded.
  expect({ events: again.events, fresh: again.fresh, alreadyRecorded: again.alreadyRecorded }).toEqual({
    events: 20,
    fresh: 0,
    alreadyRecorded: 20,
  });
  expect(await endState(db)).toEqual(before);
  for (const e of events.slice(20)) f.store.putEvent(e, false);
  const third = await runBackfill(db, f, { pageSize: 4 });
  expect(third.fresh).toBe(events.length - 20);
  expect(await endState(db)).toEqual(await webhookEndState());
});

test("`backfillEvents()` records an event Stripe lists only after a newer one was paged, when it is within the overlap window (review R9)", async () => {
  const f = fake(events.slice(0, 20));
  await runBackfill(db, f, { pageSize: 4 });
  const [cp] = await db<{ cursor_created: Date }[]>`select cursor_created from event_backfill_checkpoints`;
  // Created 60 s before the newest event the first run recorded, but listable only now.
  const late = { ...(events[25] as (typeof events)[number]), created: Math.floor(cp!.cursor_created.getTime() / 1000) - 60 };
  f.store.putEvent(late, false);
  const next = await runBackfill(db, f, { pageSize: 4 });
  expect(next.fresh).toBe(1);
  expect(await db`select source from webhook_inbox where event_id = ${late.id}`).toEqual([{ source: "api" }] as never);
});

test("`backfillEvents()` never skips same-second events across pages of one", async () => {
  const same = events.slice(0, 12).map((e) => ({ ...e, created: NOW - 100 }));
  const f = fake(same);
  const summary = await runBackfill(db, f, { pageSize: 1, since: new Date((NOW - 200) * 1000) });
  expect(summary.events).toBe(12);
  expect((await db`select count(*)::int as n from webhook_inbox`)[0]!.n).toBe(12);
});

test("`backfillEvents()` and webhook deliveries of the same events at the same time apply each event once (one connection per actor)", async () => {
  const f = fake();
  const [backfillDb, ...senders] = connections(database.url, 4);
  const target = { provider: "stripe", endpoint: "billing", handlers: handlersFor("stripe")! };
  try {
    const deliver = async (sender: Db, offset: number) => {
      const outcomes: string[] = [];
      for (let i = offset; i < events.length; i += 3)
        outcomes.push(await receiveSync(sender, target, { ...stripeApiEvent(events[i]!), source: "webhook" }));
      return outcomes;
    };
    const [summary, ...delivered] = await Promise.all([
      runBackfill(backfillDb!, f, { pageSize: 3 }),
      ...senders.map((s, i) => deliver(s, i)),
    ]);
    const webhookFresh = delivered.flat().filter((o) => o !== "duplicate").length;
    expect(summary.fresh + webhookFresh).toBe(events.length);
    expect(summary.alreadyRecorded + (events.length - webhookFresh)).toBe(events.length);
    const sources = await db`select source, count(*)::int as n from webhook_inbox group by source`;
    expect(sources.reduce((n, r) => n + (r.n as number), 0)).toBe(events.length);
    expect(await endState(db)).toEqual(await webhookEndState());
  } finally {
    await closeAll([backfillDb!, ...senders]);
  }
});

test("a row a webhook recorded first keeps source webhook when backfill meets it", async () => {
  const target = { provider: "stripe", endpoint: "billing", handlers: handlersFor("stripe")! };
  await receiveSync(db, target, { ...stripeApiEvent(events[0]!), source: "webhook" });
  const summary = await runBackfill(db, fake());
  expect(summary.alreadyRecorded).toBe(1);
  const [row] = await db`select source from webhook_inbox where event_id = ${events[0]!.id}`;
  expect(row!.source).toBe("webhook");
});

test("`backfillEvents()` with dryRun counts new and already recorded events and writes nothing", async () => {
  const target = { provider: "stripe", endpoint: "billing", handlers: handlersFor("stripe")! };
  for (const e of events.slice(0, 5)) await receiveSync(db, target, stripeApiEvent(e));
  const summary = await runBackfill(db, fake(), { dryRun: true });
  expect(summary.fresh).toBe(events.length - 5);
  expect(summary.alreadyRecorded).toBe(5);
  expect((await db`select count(*)::int as n from webhook_inbox`)[0]!.n).toBe(5);
  expect((await db`select count(*)::int as n from event_backfill_checkpoints`)[0]!.n).toBe(0);
});

test("`backfillEvents()` with types or undelivered records only those and leaves the checkpoint alone", async () => {
  const f = fake(events, true);
  f.store.undelivered.add(events[3]!.id);
  const undelivered = await runBackfill(db, f, { filters: { undelivered: true }, filtered: true });
  expect(undelivered.events).toBe(1);
  const typed = await runBackfill(db, f, { filters: { types: ["invoice.voided"] }, filtered: true });
  expect(typed.events).toBe(events.filter((e) => e.type === "invoice.voided").length);
  expect(f.store.requests.some((r) => r.query.delivery_success === "false")).toBe(true);
  expect((await db`select count(*)::int as n from event_backfill_checkpoints where covered_until is not null`)[0]!.n).toBe(0);
});

test("`backfillEvents()` retries Stripe's 429 and 5xx answers and records everything", async () => {
  const f = fake();
  f.store.failNext(2, 429, /^\/v1\/events/);
  f.store.failNext(1, 503, /^\/v1\/events/);
  f.store.rateLimitFraction = 0.2;
  const summary = await runBackfill(db, f, { pageSize: 7 });
  expect(summary.fresh).toBe(events.length);
  expect(f.store.requests.filter((r) => r.status === 429).length).toBeGreaterThanOrEqual(2);
  expect(f.store.requests.some((r) => r.status === 503)).toBe(true);
});

test("`backfillEvents()` in async mode queues the rows for the worker, in hybrid mode processes them", async () => {
  await runBackfill(db, fake(events.slice(0, 6)), { mode: "async" });
  const queued = await db`select count(*)::int as n from webhook_inbox where processed_at is null and source = 'api'`;
  expect(queued[0]!.n).toBeGreaterThan(0);
  await database.drop();
  database = await freshDatabase();
  db = database.db;
  await runBackfill(db, fake(events.slice(0, 6)), { mode: "hybrid" });
  expect((await db`select count(*)::int as n from webhook_inbox where processed_at is null`)[0]!.n).toBe(0);
});

test("`backfillEvents()` finds another process holding the endpoint's lease busy, and takes a lease that ran out", async () => {
  await db`insert into event_backfill_checkpoints (provider, endpoint, lease_owner, lease_until) values ('stripe', 'billing', 'other', now() + interval '1 minute')`;
  const busy = await runBackfill(db, fake());
  expect(busy.status).toBe("busy");
  expect((await db`select count(*)::int as n from webhook_inbox`)[0]!.n).toBe(0);
  await db`update event_backfill_checkpoints set lease_until = now() - interval '1 second'`;
  expect((await runBackfill(db, fake())).fresh).toBe(events.length);
});

test("`backfillEvents()` meets an event a webhook already applied as a duplicate, whatever its handler writes: no error, its handler does not run again, the checkpoint passes it (review R4)", async () => {
  // A handler that writes without any check of its own: only the inbox keeps it to one run per event.
  await db`create table handler_runs (event_id text not null)`;
  const writing = handlerTable({
    "invoice.paid": async (tx, _object, context) => void (await tx`insert into handler_runs values (${context.eventId})`),
  });
  const target = { provider: "stripe", endpoint: "billing", handlers: writing };
  const paid = events.filter((e) => e.type === "invoice.paid");
  expect(await receiveSync(db, target, { ...stripeApiEvent(paid[0]), source: "webhook" })).toBe("processed");
  const f = fake(paid);
  const summary = await runBackfill(db, f, { target, since: new Date((NOW - 7_200) * 1000) });
  expect(summary.status).toBe("done");
  expect(summary.outcomes).toMatchObject({ duplicate: 1, processed: paid.length - 1 });
  expect((await db`select count(*)::int as n from handler_runs`)[0]!.n).toBe(paid.length);
  const [cp] = await db`select cursor_event_id from event_backfill_checkpoints`;
  expect(cp!.cursor_event_id).toBe(paid.at(-1)!.id);
});
