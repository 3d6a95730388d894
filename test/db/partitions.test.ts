// The inbox partitioned by week of the event's creation time (sql/0026): deduplication stays exact across
// partitions and under concurrency, purge drops whole weeks and keeps what is inside the horizon, the
// default partition takes times with no partition, ensure-partitions is idempotent under concurrent
// callers, and the migration converts an unpartitioned inbox with its rows.
import { afterAll, beforeEach, expect, test } from "bun:test";
import postgres from "postgres";
import { migrate } from "../../src/db/migrate.ts";
import { handlerTable } from "../../src/handlers/handler-table.ts";
import { ensurePartitions, listPartitions } from "../../src/inbox/partitions.ts";
import { purge } from "../../src/ops/purge.ts";
import { stripeApiEvent } from "../../src/providers/stripe.ts";
import { receiveSync } from "../../src/receiver/receive.ts";
import { loadMigrations } from "../../src/runtime/migrations-fs.ts";
import { keepPartitionsAhead } from "../../src/runtime/partition-upkeep.ts";
import { closeAll, connections, count, eventBody, freshDatabase, verified } from "../support/helpers.ts";

const fresh = await freshDatabase();
const db = fresh.db;
const others: { drop(): Promise<void> }[] = [];
afterAll(async () => {
  for (const o of others) await o.drop();
  await fresh.drop();
});
beforeEach(async () => {
  await db`truncate webhook_inbox`;
  await db`create table if not exists handler_runs (event_id text not null)`;
  await db`truncate handler_runs`;
});

const DAY_MS = 86_400_000;
/** Not idempotent on its own: every run adds a row, so a second application of one event shows. */
const counting = handlerTable({
  "thing.happened": async (tx, _object, context) => void (await tx`insert into handler_runs values (${context.eventId})`),
});
const target = { provider: "stripe", endpoint: "billing", handlers: counting };

/** A Stripe event body created at `createdSec` (omitted: an event with no creation time). */
function body(id: string, createdSec?: number): string {
  const event = JSON.parse(eventBody(id, "thing.happened", { id: `obj_${id}`, object: "thing" })) as Record<string, unknown>;
  if (createdSec === undefined) delete event.created;
  else event.created = createdSec;
  return JSON.stringify(event);
}

async function partitionOf(eventId: string): Promise<string[]> {
  const rows = await db<{ p: string }[]>`select tableoid::regclass::text as p from webhook_inbox where event_id = ${eventId}`;
  return rows.map((r) => r.p);
}

async function weekStartSec(weeksFromNow: number): Promise<number> {
  const [row] = await db<{ s: string }[]>`
    select extract(epoch from date_trunc('week', now(), 'UTC') + ${weeksFromNow} * interval '7 days')::bigint as s
  `;
  return Number(row?.s);
}

test("`receiveSync()` records one row and runs the handler once for 8 concurrent deliveries (and an API read) of events at both ends of a week boundary, and of an undated event", async () => {
  const boundary = await weekStartSec(0);
  const cases = [
    { id: "evt_last_second_of_week", created: boundary - 1 },
    { id: "evt_first_second_of_week", created: boundary },
    { id: "evt_undated", created: undefined },
  ];
  const actors = connections(fresh.url, 8);
  try {
    for (const c of cases) {
      const text = body(c.id, c.created);
      const outcomes = await Promise.all(actors.map((a) => receiveSync(a, target, verified(text))));
      expect(outcomes.filter((o) => o === "processed")).toHaveLength(1);
      expect(outcomes.filter((o) => o === "duplicate")).toHaveLength(7);
      // The same event read from Stripe's Events API (backfill) meets the same key.
      expect(await receiveSync(db, target, stripeApiEvent(JSON.parse(text)))).toBe("duplicate");
      expect(await count(db, "handler_runs", `event_id = '${c.id}'`)).toBe(1);
    }
  } finally {
    await closeAll(actors);
  }
  const weekBefore = `webhook_inbox_${new Date((boundary - 7 * 86_400) * 1000).toISOString().slice(0, 10).replaceAll("-", "")}`;
  const weekOf = `webhook_inbox_${new Date(boundary * 1000).toISOString().slice(0, 10).replaceAll("-", "")}`;
  expect(await partitionOf("evt_last_second_of_week")).toEqual([weekBefore]);
  expect(await partitionOf("evt_first_second_of_week")).toEqual([weekOf]);
  expect(await partitionOf("evt_undated")).toEqual(["webhook_inbox_undated"]);
});

test("`purge()` drops whole weeks past the horizon, moves their unsettled rows to the default partition, keeps every row inside the horizon, and redeliveries of kept events stay duplicates", async () => {
  const now = Math.floor(Date.now() / 1000);
  const events = {
    old: now - 40 * 86_400, // settled, in a week wholly past 31 days: dropped
    oldWaiting: now - 40 * 86_400, // unprocessed: never deleted, moved
    inside: now - 20 * 86_400, // settled, inside the horizon: kept
    justInside: now - 30 * 86_400,
  };
  for (const [id, created] of Object.entries(events)) expect(await receiveSync(db, target, verified(body(id, created)))).toBe("processed");
  await db`update webhook_inbox set processed_at = null, outcome = null where event_id = 'oldWaiting'`;
  const oldPartition = (await partitionOf("old"))[0] ?? "";

  const dry = await purge(db, { olderThanMs: 31 * DAY_MS, dryRun: true });
  expect(dry).toMatchObject({ deleted: 1, openRowsMoved: 1 });
  expect(dry.partitionsDropped).toContain(oldPartition);
  expect(await count(db, "webhook_inbox")).toBe(4);

  const result = await purge(db, { olderThanMs: 31 * DAY_MS });
  expect(result).toMatchObject({ deleted: 1, openRowsMoved: 1 });
  expect(result.partitionsDropped).toEqual(dry.partitionsDropped);
  expect((await listPartitions(db)).map((p) => p.name)).not.toContain(oldPartition);
  expect((await db`select event_id from webhook_inbox order by event_id`).map((r) => r.event_id)).toEqual([
    "inside",
    "justInside",
    "oldWaiting",
  ]);
  expect(await partitionOf("oldWaiting")).toEqual(["webhook_inbox_default"]);
  for (const id of ["inside", "justInside", "oldWaiting"] as const)
    expect(await receiveSync(db, target, verified(body(id, events[id])))).toBe("duplicate");
  expect(await count(db, "handler_runs")).toBe(4);
});

test("`purge()` deletes in batches inside the straddling week only what is past the horizon, and `wholePartitions` leaves that week alone", async () => {
  // Two settled events in the week that holds now - 31 days, one on each side of the cutoff when possible.
  const [row] = await db<{ lo: string; cutoff: string }[]>`
    select extract(epoch from date_trunc('week', now() - interval '31 days', 'UTC'))::bigint as lo,
           extract(epoch from now() - interval '31 days')::bigint as cutoff
  `;
  const lo = Number(row?.lo);
  const cutoff = Number(row?.cutoff);
  const past = Math.max(lo, cutoff - 3_600);
  const kept = cutoff + 3_600;
  expect(await receiveSync(db, target, verified(body("past", past)))).toBe("processed");
  expect(await receiveSync(db, target, verified(body("kept", kept)))).toBe("processed");
  expect(await purge(db, { olderThanMs: 31 * DAY_MS, wholePartitions: true })).toMatchObject({ deleted: 0 });
  expect(await purge(db, { olderThanMs: 31 * DAY_MS, batchSize: 1 })).toMatchObject({ deleted: 1, partitionsDropped: [] });
  expect((await db`select event_id from webhook_inbox`).map((r) => r.event_id)).toEqual(["kept"]);
});

test("an event dated beyond the partitions lands in the default partition, stays a duplicate, moves into its week when that week is created, and purge keeps it", async () => {
  const farWeek = await weekStartSec(7);
  const text = body("evt_future", farWeek + 60);
  expect(await receiveSync(db, target, verified(text))).toBe("processed");
  expect(await partitionOf("evt_future")).toEqual(["webhook_inbox_default"]);
  expect(await receiveSync(db, target, verified(text))).toBe("duplicate");
  expect(await purge(db, { olderThanMs: 31 * DAY_MS })).toMatchObject({ deleted: 0 });
  expect(await ensurePartitions(db, 9 * 7 * DAY_MS)).toBeGreaterThan(0);
  expect(await partitionOf("evt_future")).toEqual([
    `webhook_inbox_${new Date(farWeek * 1000).toISOString().slice(0, 10).replaceAll("-", "")}`,
  ]);
  expect(await receiveSync(db, target, verified(text))).toBe("duplicate");
  expect(await count(db, "handler_runs")).toBe(1);
});

test("`ensurePartitions()` from 4 connections at once creates each week once; a second call creates none", async () => {
  const before = (await listPartitions(db)).length;
  const actors = connections(fresh.url, 4);
  try {
    const created = await Promise.all(actors.map((a) => ensurePartitions(a, 20 * 7 * DAY_MS)));
    const total = created.reduce((a, b) => a + b, 0);
    expect(total).toBeGreaterThan(0);
    expect(created.filter((n) => n > 0)).toHaveLength(1);
    expect((await listPartitions(db)).length).toBe(before + total);
    expect(await ensurePartitions(db, 20 * 7 * DAY_MS)).toBe(0);
  } finally {
    await closeAll(actors);
  }
});

test("sql/0026 converts an unpartitioned inbox with rows: every row and key kept, undated rows recognised, redeliveries stay duplicates", async () => {
  const old = await freshDatabase({ migrated: false });
  others.push(old);
  const all = loadMigrations();
  const raw = postgres(old.url, { max: 1, onnotice: () => {} });
  try {
    await migrate(
      raw,
      all.filter((m) => m.version < 25),
    );
    // As insertInbox wrote them before 0026: dated Stripe events (created = to_timestamp(created)), an
    // event without a creation time (event_created_at = now() = received_at), an open one, a year-old one.
    await raw`
      insert into webhook_inbox (provider, endpoint, event_id, event_type, payload, event_created_at, processed_at, outcome)
      select 'stripe', 'billing', 'evt_old_' || g, 'thing.happened',
             jsonb_build_object('id', 'evt_old_' || g, 'created', extract(epoch from now())::bigint - g * 86400),
             to_timestamp(extract(epoch from now())::bigint - g * 86400), now(), 'processed'
        from generate_series(0, 400) g
    `;
    await raw`insert into webhook_inbox (provider, endpoint, event_id, event_type, payload) values ('github', 'gh', 'delivery-1', 'push', '{}')`;
    await raw`update webhook_inbox set processed_at = null, outcome = null where event_id = 'evt_old_3'`;
    const before = await raw`select provider, endpoint, event_id, processed_at, payload from webhook_inbox order by 1, 2, 3`;

    expect(await migrate(raw, all)).toEqual(all.filter((m) => m.version >= 25).map((m) => m.name));
    const after = await raw`select provider, endpoint, event_id, processed_at, payload from webhook_inbox order by 1, 2, 3`;
    expect(after).toEqual(before);
    const [kind] = await raw<{ relkind: string }[]>`select relkind from pg_class where relname = 'webhook_inbox'`;
    expect(kind?.relkind).toBe("p");
    expect((await raw`select tableoid::regclass::text as p, event_created_at from webhook_inbox where event_id = 'delivery-1'`)[0]?.p).toBe(
      "webhook_inbox_undated",
    );
    expect(await raw`select 1 from webhook_inbox_state where event_id = 'evt_old_3' and state = 'unprocessed'`).toHaveLength(1);

    const redeliver = async (id: string, provider: string, endpoint: string, createdSec?: number) =>
      receiveSync(raw, { provider, endpoint, handlers: counting }, verified(body(id, createdSec)));
    await raw`create table handler_runs (event_id text not null)`;
    const [r5] = await raw<{ c: string }[]>`select (payload ->> 'created') as c from webhook_inbox where event_id = 'evt_old_5'`;
    expect(await redeliver("evt_old_5", "stripe", "billing", Number(r5?.c))).toBe("duplicate");
    expect(await redeliver("delivery-1", "github", "gh")).toBe("duplicate");
    expect(await count(raw, "handler_runs")).toBe(0);
  } finally {
    await raw.end();
  }
});

test("`keepPartitionsAhead()` (serve's upkeep) recreates a missing week ahead on its own and moves that week's rows out of the default partition", async () => {
  const week = await weekStartSec(2);
  const name = `webhook_inbox_${new Date(week * 1000).toISOString().slice(0, 10).replaceAll("-", "")}`;
  await db.unsafe(`drop table if exists ${name}`);
  const text = body("evt_upkeep", week + 3_600);
  expect(await receiveSync(db, target, verified(text))).toBe("processed");
  expect(await partitionOf("evt_upkeep")).toEqual(["webhook_inbox_default"]);
  const stop = new AbortController();
  const lines: Record<string, unknown>[] = [];
  const upkeep = keepPartitionsAhead(db, stop.signal, (line) => lines.push(line), 50);
  try {
    const deadline = Date.now() + 10_000;
    while ((await partitionOf("evt_upkeep"))[0] !== name && Date.now() < deadline) await Bun.sleep(50);
  } finally {
    stop.abort();
    await upkeep;
  }
  expect(await partitionOf("evt_upkeep")).toEqual([name]);
  expect(lines.find((l) => l.partitions === "created")).toMatchObject({ count: 1 });
  expect(await receiveSync(db, target, verified(text))).toBe("duplicate");
  expect(await count(db, "handler_runs")).toBe(1);
});
