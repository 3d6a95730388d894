// The inbox key is the seed's (provider, endpoint, event_id), a primary key with no sender's timestamp in
// it (sql/0027): one event id is one row however its deliveries date it, on every path; a second row is
// refused by the constraint itself; a payload goes to its week's partition, and one that finds no
// partition lands in the default one and makes the partitions be created (review of fcab188: N1, R7, R12).
import { afterAll, beforeEach, expect, test } from "bun:test";
import type { RunningFakeStripe } from "../../src/dev/fake-stripe/serve.ts";
import { handlerTable } from "../../src/handlers/handler-table.ts";
import { ensurePartitions, listPartitions } from "../../src/inbox/partitions.ts";
import { stripeApiEvent } from "../../src/providers/stripe.ts";
import { receiveAsync, receiveSync } from "../../src/receiver/receive.ts";
import { claimBatch } from "../../src/worker/claim.ts";
import { fakeWith, runBackfill } from "../reconcile/backfill-support.ts";
import { closeAll, connections, count, eventBody, freshDatabase, verified } from "../support/helpers.ts";
import { waitUntil } from "../support/wait-until.ts";

const fresh = await freshDatabase();
const db = fresh.db;
const fakes: RunningFakeStripe[] = [];
afterAll(async () => {
  await Promise.all(fakes.map((f) => f.stop()));
  await fresh.drop();
});
beforeEach(async () => {
  await db`truncate webhook_inbox, webhook_inbox_payloads, event_backfill_checkpoints`;
  await db`create table if not exists handler_runs (event_id text not null)`;
  await db`truncate handler_runs`;
});

/** Not idempotent on its own: every run adds a row, so a second application of one event shows. */
const counting = handlerTable({
  "thing.happened": async (tx, _object, context) => void (await tx`insert into handler_runs values (${context.eventId})`),
});
const target = { provider: "stripe", endpoint: "billing", handlers: counting };
const NOW_SEC = Math.floor(Date.now() / 1000);

/** A signed-shaped Stripe event `id` created at `createdSec` (undefined: the event has no `created`). */
function body(id: string, createdSec: number | undefined): string {
  const event = JSON.parse(eventBody(id, "thing.happened", { id: `obj_${id}`, object: "thing" })) as Record<string, unknown>;
  if (createdSec === undefined) delete event.created;
  else event.created = createdSec;
  return JSON.stringify(event);
}

test("`receiveSync()` records one event id delivered with two `created` values, and without one, as one row: one processed, the rest duplicates", async () => {
  const outcomes = [];
  for (const created of [NOW_SEC - 60, NOW_SEC - 86_400 * 40, undefined, NOW_SEC + 3_600])
    outcomes.push(await receiveSync(db, target, verified(body("evt_two_dates", created))));
  expect(outcomes).toEqual(["processed", "duplicate", "duplicate", "duplicate"]);
  expect(await count(db, "webhook_inbox", "event_id = 'evt_two_dates'")).toBe(1);
  expect(await count(db, "webhook_inbox_payloads", "event_id = 'evt_two_dates'")).toBe(1);
  expect(await count(db, "handler_runs")).toBe(1);
  // The creation time is data: the first delivery's, as it was sent.
  const [row] = await db<{ created: number }[]>`select extract(epoch from event_created_at)::int as created from webhook_inbox`;
  expect(row?.created).toBe(NOW_SEC - 60);
});

test("`receiveSync()` from 8 connections at once, each delivery dating the event differently (or not at all), runs the handler once", async () => {
  const actors = connections(fresh.url, 8);
  try {
    const dates = [undefined, NOW_SEC, NOW_SEC - 1, NOW_SEC - 604_800, NOW_SEC + 604_800, 1, undefined, NOW_SEC - 86_400 * 90];
    const outcomes = await Promise.all(actors.map((a, i) => receiveSync(a, target, verified(body("evt_racing", dates[i])))));
    expect(outcomes.filter((o) => o === "processed")).toHaveLength(1);
    expect(outcomes.filter((o) => o === "duplicate")).toHaveLength(7);
  } finally {
    await closeAll(actors);
  }
  expect(await count(db, "webhook_inbox")).toBe(1);
  expect(await count(db, "webhook_inbox_payloads")).toBe(1);
  expect(await count(db, "handler_runs")).toBe(1);
});

test("an event delivered by webhook and listed again by Stripe's Events API under another `created` is one row: the backfill finds it already recorded (trial N1)", async () => {
  const ids = ["evt_n1_a", "evt_n1_b", "evt_n1_c"];
  for (const id of ids) expect(await receiveSync(db, target, verified(body(id, NOW_SEC - 86_400 * 300)))).toBe("processed");
  // The Events API's copies, dated within its 30 days (a source that dates an event differently).
  const fake = fakeWith(
    ids.map((id, i) => ({ ...(JSON.parse(body(id, NOW_SEC - 120 + i)) as { id: string; object: string }), created: NOW_SEC - 120 + i })),
  );
  fakes.push(fake);
  const summary = await runBackfill(db, fake, { since: new Date((NOW_SEC - 3_600) * 1000), target });
  expect({ events: summary.events, fresh: summary.fresh, alreadyRecorded: summary.alreadyRecorded }).toEqual({
    events: 3,
    fresh: 0,
    alreadyRecorded: 3,
  });
  expect(await count(db, "webhook_inbox")).toBe(3);
  expect(await count(db, "webhook_inbox", "source = 'webhook'")).toBe(3);
  expect(await count(db, "handler_runs")).toBe(3);
});

test("the inbox's primary key is (provider, endpoint, event_id): a second row of one event id is refused by the constraint, whatever its creation time (review R7)", async () => {
  const [pk] = await db<{ def: string }[]>`
    select pg_get_constraintdef(oid) as def from pg_constraint where conrelid = 'webhook_inbox'::regclass and contype = 'p'
  `;
  expect(pk?.def).toBe("PRIMARY KEY (provider, endpoint, event_id)");
  await db`insert into webhook_inbox (provider, endpoint, event_id, event_type, event_created_at) values ('stripe', 'billing', 'evt_r7', 'thing.happened', now())`;
  const second = await db`
    insert into webhook_inbox (provider, endpoint, event_id, event_type, event_created_at)
    values ('stripe', 'billing', 'evt_r7', 'thing.happened', now() - interval '1 year')
  `.catch((err: unknown) => err);
  expect((second as { code?: string }).code).toBe("23505");
  // The worker claims the one due row once: never a settled row beside it.
  const claims = await claimBatch(db, { limit: 10, leaseMs: 60_000, maxAttempts: 5 });
  expect(claims.map((c) => c.eventId)).toEqual(["evt_r7"]);
  expect(await claimBatch(db, { limit: 10, leaseMs: 60_000, maxAttempts: 5 })).toEqual([]);
});

test("`receiveAsync()` queues one row for an event id delivered twice with different dates, and the worker's claim returns its payload", async () => {
  const queued = handlerTable({ "thing.happened": counting["thing.happened"]! });
  const t = { ...target, handlers: queued };
  expect(await receiveAsync(db, t, verified(body("evt_async_dates", NOW_SEC)))).toBe("queued");
  expect(await receiveAsync(db, t, verified(body("evt_async_dates", undefined)))).toBe("duplicate");
  const claims = await claimBatch(db, { limit: 10, leaseMs: 60_000, maxAttempts: 5 });
  expect(claims).toHaveLength(1);
  expect(claims[0]?.payload).toMatchObject({ id: "evt_async_dates", created: NOW_SEC });
});

test("a payload whose week has no partition lands in the default one, its delivery is answered, and the receiver has the partitions made and the payload moved into its week (review R12)", async () => {
  const [week] = await db<{ name: string }[]>`
    select 'webhook_inbox_payloads_' || to_char(date_trunc('week', now(), 'UTC') at time zone 'UTC', 'YYYYMMDD') as name
  `;
  const name = week!.name;
  await db.unsafe(`alter table webhook_inbox_payloads detach partition ${name}`);
  await db.unsafe(`drop table ${name}`);
  expect(await receiveSync(db, target, verified(body("evt_spill", NOW_SEC)))).toBe("processed");
  const partitionOf = async () =>
    (await db<{ p: string }[]>`select tableoid::regclass::text as p from webhook_inbox_payloads where event_id = 'evt_spill'`)[0]?.p;
  // Created in the background after the commit (keepPartitionsAfterSpill), on any runtime: no timer is involved.
  await waitUntil("the spilled payload moved into its week's partition", async () => (await partitionOf()) === name);
  expect(await receiveSync(db, target, verified(body("evt_spill", NOW_SEC)))).toBe("duplicate");
  expect(await count(db, "handler_runs")).toBe(1);
  expect(await count(db, "webhook_inbox_payloads_default")).toBe(0);
});

test("the creation time of an event from Stripe's API and of its webhook delivery are the same data, read from the one `created`", async () => {
  const event = JSON.parse(body("evt_api_copy", NOW_SEC - 30)) as Record<string, unknown>;
  expect(stripeApiEvent(event).createdAt?.getTime()).toBe((NOW_SEC - 30) * 1000);
  expect(verified(JSON.stringify(event)).createdAt?.getTime()).toBe((NOW_SEC - 30) * 1000);
});

test("`ensurePartitions()` from 4 connections at once creates each week once; a second call creates none", async () => {
  const WEEK_MS = 7 * 86_400_000;
  const before = (await listPartitions(db)).length;
  const actors = connections(fresh.url, 4);
  try {
    const created = await Promise.all(actors.map((a) => ensurePartitions(a, 20 * WEEK_MS)));
    const total = created.reduce((a, b) => a + b, 0);
    expect(total).toBeGreaterThan(0);
    expect(created.filter((n) => n > 0)).toHaveLength(1);
    expect((await listPartitions(db)).length).toBe(before + total);
    expect(await ensurePartitions(db, 20 * WEEK_MS)).toBe(0);
  } finally {
    await closeAll(actors);
  }
});
