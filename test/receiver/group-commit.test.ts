// createGroupCommit (async mode with group commit) against real PostgreSQL. Groups are formed without
// timers: the first delivery is sent alone, and deliveries made while its insert is in flight form
// the next group, so each test builds its groups deterministically by calling receive() in one tick.
import { afterAll, beforeAll, expect, test } from "bun:test";
import { connect, isDataError, type Db } from "../../src/db/db.ts";
import { billingHandlers } from "../../src/handlers/billing.ts";
import { createGroupCommit } from "../../src/receiver/group-commit.ts";
import { createLimiter } from "../../src/receiver/limiter.ts";
import { inboxRow, insertInbox } from "../../src/inbox/inbox.ts";
import { jsonbCopy } from "../../src/providers/jsonb-text.ts";
import { receiveAsync, type Outcome, type ReceiveTarget } from "../../src/receiver/receive.ts";
import { closeAll, connections, count, eventBody, freshDatabase, invoice, verified } from "../support/helpers.ts";

let fresh: Awaited<ReturnType<typeof freshDatabase>>;
let db: Db;
const actors: Db[][] = [];

beforeAll(async () => {
  fresh = await freshDatabase();
  db = fresh.db;
});

afterAll(async () => {
  for (const group of actors) await closeAll(group);
  await fresh?.drop();
});

const BILLING: ReceiveTarget = { provider: "stripe", endpoint: "billing", handlers: billingHandlers };

/** Bun's default 5 s per test is too tight for the concurrent test; a bound, not a speed assertion. */
const CONCURRENT_TEST_TIMEOUT_MS = 30_000;

/** A verified invoice.paid event `id` (a handled type: recorded for a worker). */
function paid(id: string) {
  return verified(eventBody(id, "invoice.paid", invoice({ id: `in_${id}`, status: "paid", amount_paid: 2000 })));
}

/** The events among `ids` grouped by the transaction that inserted them (`xmin`), in the order of their first id. */
async function transactions(ids: string[]): Promise<string[][]> {
  const rows = await db<{ event_id: string; tx: string }[]>`
    select event_id, xmin::text as tx from webhook_inbox where event_id = any(${ids}::text[])`;
  const byTx = new Map<string, string[]>();
  for (const id of ids) {
    const tx = rows.find((r) => r.event_id === id)?.tx;
    if (tx === undefined) continue;
    if (!byTx.has(tx)) byTx.set(tx, []);
    if (!byTx.get(tx)!.includes(id)) byTx.get(tx)!.push(id);
  }
  return [...byTx.values()];
}

/**
 * The inbox rows of `eventId` by endpoint, as the columns a delivery writes: its state row and its
 * payload row (sql/0027), and whether a payload row is there at all.
 */
async function rowsOf(eventId: string) {
  return db`
    select w.event_type, p.payload, p.raw_body, p.payload_sanitized, p.received_at is not null as kept,
           w.outcome, w.processed_at is not null as settled, w.attempts, w.last_error
      from webhook_inbox w
      left join webhook_inbox_payloads p using (provider, endpoint, event_id, received_at)
     where w.event_id = ${eventId}
     order by w.endpoint
  `;
}

/** The one inbox row of `eventId` (see {@link rowsOf}), undefined when there is none. */
async function row(eventId: string) {
  const rows = await rowsOf(eventId);
  expect(rows.length).toBeLessThanOrEqual(1);
  return rows[0];
}

test("`createGroupCommit()` sends a lone delivery at once, alone, and a group writes the rows receiveAsync writes", async () => {
  const fallbacks: unknown[] = [];
  const groups = createGroupCommit(db, { onFallback: (_, err) => fallbacks.push(err) });
  const other: ReceiveTarget = { ...BILLING, endpoint: "other" };
  const plain = paid("evt_gc_lone");
  const body = eventBody("evt_gc_lone_nul", "invoice.paid", invoice({ id: "in_gc_lone_nul", description: "a\u0000b" }));
  const copy = jsonbCopy(body);
  const sanitized = { ...verified(body), sanitized: copy && { ...copy, typeChanged: false } };
  expect(sanitized.sanitized).toBeDefined();
  const answer = groups.receive(BILLING, paid("evt_gc_lone_first"));
  // These two arrive while the first is in flight: the next group, one multi-row insert.
  const grouped = [groups.receive(BILLING, plain), groups.receive(BILLING, sanitized)];
  expect(await answer).toBe("queued");
  expect(await Promise.all(grouped)).toEqual(["queued", "queued"]);
  expect(await transactions(["evt_gc_lone_first", plain.id, sanitized.id])).toEqual([["evt_gc_lone_first"], [plain.id, sanitized.id]]);
  expect(fallbacks).toEqual([]); // written by the group's statement, not redone one by one
  for (const event of [plain, sanitized]) {
    expect(await receiveAsync(db, other, event)).toBe("queued");
    const rows = await rowsOf(event.id);
    expect(rows.length).toBe(2);
    expect(rows[0]).toMatchObject({ kept: true, outcome: null, settled: false, attempts: 0 });
    expect(rows[0]).toEqual(rows[1]!);
  }
  expect(await rowsOf("evt_gc_lone_nul")).toMatchObject([
    { payload_sanitized: copy?.replaced, raw_body: body, payload: JSON.parse(copy!.json) },
    { payload_sanitized: copy?.replaced, raw_body: body, payload: JSON.parse(copy!.json) },
  ]);
  expect(await count(db, "webhook_inbox_payloads", `event_id in ('${plain.id}', '${sanitized.id}')`)).toBe(4);
});

test("`createGroupCommit()` records a group with an in-group duplicate as one row: one `queued`, one `duplicate`", async () => {
  const fallbacks: number[] = [];
  const groups = createGroupCommit(db, { onFallback: (deliveries) => fallbacks.push(deliveries) });
  const unhandled = verified(eventBody("evt_gc_unhandled", "customer.created", { id: "cus_gc", object: "customer" }));
  const answers = [
    groups.receive(BILLING, paid("evt_gc_a")),
    groups.receive(BILLING, paid("evt_gc_b")),
    groups.receive(BILLING, paid("evt_gc_c")),
    groups.receive(BILLING, paid("evt_gc_c")),
    groups.receive(BILLING, unhandled),
  ];
  expect(await Promise.all(answers)).toEqual(["queued", "queued", "queued", "duplicate", "ignored"]);
  expect(await transactions(["evt_gc_a", "evt_gc_b", "evt_gc_c", "evt_gc_unhandled"])).toEqual([
    ["evt_gc_a"],
    ["evt_gc_b", "evt_gc_c", "evt_gc_unhandled"],
  ]);
  expect(fallbacks).toEqual([]);
  expect(await count(db, "webhook_inbox", "event_id in ('evt_gc_a', 'evt_gc_b', 'evt_gc_c', 'evt_gc_unhandled')")).toBe(4);
  expect(await row("evt_gc_c")).toMatchObject({ outcome: null, settled: false });
  expect(await row("evt_gc_unhandled")).toMatchObject({ outcome: "ignored", settled: true });
  // A later delivery of a grouped key is a duplicate, as always.
  expect(await groups.receive(BILLING, paid("evt_gc_b"))).toBe("duplicate");
});

test("`createGroupCommit()` retries a group one by one when PostgreSQL refuses one row: only that delivery fails", async () => {
  const fallbacks: number[] = [];
  const groups = createGroupCommit(db, { onFallback: (deliveries) => fallbacks.push(deliveries) });
  // \u0000 in a string, without the sanitized copy the verifier would make: jsonb refuses it (22P05).
  const refused = verified(eventBody("evt_gc_refused", "invoice.paid", invoice({ id: "in_gc_refused", description: "a\u0000b" })));
  const answers = [
    groups.receive(BILLING, paid("evt_gc_first")),
    groups.receive(BILLING, paid("evt_gc_left")),
    groups.receive(BILLING, refused).catch((err: unknown) => err),
    groups.receive(BILLING, paid("evt_gc_right")),
  ];
  const [first, left, failure, right] = await Promise.all(answers);
  expect(fallbacks).toEqual([3]);
  expect([first, left, right]).toEqual(["queued", "queued", "queued"]);
  expect(isDataError(failure)).toBe(true);
  expect(await row("evt_gc_left")).toMatchObject({ outcome: null, settled: false });
  expect(await row("evt_gc_right")).toMatchObject({ outcome: null, settled: false });
  expect(await row("evt_gc_refused")).toBeUndefined();
});

test("`createGroupCommit()` rejects every delivery of a group when the database is unavailable", async () => {
  const down = connect("postgres://nobody@127.0.0.1:1/none", { connectTimeoutSec: 1 });
  try {
    const groups = createGroupCommit(down);
    const answers = ["evt_gc_down_1", "evt_gc_down_2", "evt_gc_down_3"].map((id) =>
      groups.receive(BILLING, paid(id)).then(
        (outcome) => outcome,
        (err: unknown) => (err as { code?: string }).code,
      ),
    );
    expect(await Promise.all(answers)).toEqual(["ECONNREFUSED", "ECONNREFUSED", "ECONNREFUSED"]);
  } finally {
    await down.end({ timeout: 1 });
  }
});

test(
  "`createGroupCommit()` records exactly one row per event for 240 parallel deliveries on 4 receivers, and every `queued` has its row",
  async () => {
    const pools = connections(fresh.url, 4);
    actors.push(pools);
    await Promise.all(pools.map((pool) => pool`select 1`));
    const receivers = pools.map((pool) => createGroupCommit(pool, { maxRows: 16 }));
    const ids = Array.from({ length: 60 }, (_, i) => `evt_gc_many_${i}`);
    // Every event delivered 4 times, each time by another receiver and in another order.
    const deliveries = ids.flatMap((id, i) => receivers.map((receiver, r) => ({ id, receiver, order: (i * 7 + r * 13) % 240 })));
    deliveries.sort((a, b) => a.order - b.order);
    const outcomes = await Promise.all(
      deliveries.map(async ({ id, receiver }) => ({ id, outcome: (await receiver.receive(BILLING, paid(id))) as Outcome })),
    );
    const rows = await db<{ event_id: string }[]>`select event_id from webhook_inbox where event_id like 'evt_gc_many_%'`;
    expect(rows.map((r) => r.event_id).sort()).toEqual([...ids].sort());
    for (const id of ids) {
      const mine = outcomes.filter((o) => o.id === id).map((o) => o.outcome);
      expect(mine.sort()).toEqual(["duplicate", "duplicate", "duplicate", "queued"]);
    }
  },
  CONCURRENT_TEST_TIMEOUT_MS,
);

test("`createGroupCommit()` with a limiter: a group holds one slot for all its deliveries, and a group that gets no slot within the queue timeout is refused overloaded, nothing written", async () => {
  const limiter = createLimiter(1, 150);
  const groups = createGroupCommit(db, { limiter });
  const settle = (id: string) =>
    groups.receive(BILLING, paid(id)).then(
      (outcome) => outcome,
      (err: unknown) => (err as { code?: string }).code,
    );
  // The only slot is taken (a sync delivery stuck on a lock, say): neither group may send its insert.
  let release!: () => void;
  const held = limiter.run(() => new Promise<void>((resolve) => (release = resolve)));
  const refused = await Promise.all(["evt_gc_slot_1", "evt_gc_slot_2", "evt_gc_slot_3"].map(settle));
  expect(refused).toEqual(["overloaded", "overloaded", "overloaded"]);
  expect(await count(db, "webhook_inbox", "event_id like 'evt_gc_slot_%'")).toBe(0);
  release();
  await held;
  // With the slot free: one group of one, then one group of five, each holding the one slot.
  const ids = ["evt_gc_slot_4", "evt_gc_slot_5", "evt_gc_slot_6", "evt_gc_slot_7", "evt_gc_slot_8", "evt_gc_slot_9"];
  const accepted = await Promise.all(ids.map(settle));
  expect(accepted).toEqual(Array(6).fill("queued"));
  expect(await transactions(ids)).toEqual([ids.slice(0, 1), ids.slice(1)]);
  expect(limiter.active).toBe(0);
});

test("`createGroupCommit()` inserts a group's rows in key order: two receivers given the same keys in opposite orders wait for each other instead of deadlocking", async () => {
  const [blocker, ...pools] = connections(fresh.url, 3);
  actors.push([blocker!, ...pools]);
  const ids = Array.from({ length: 9 }, (_, i) => `evt_gc_order_${i}`);
  const fallbacks: unknown[] = [];
  const receivers = pools.map((pool) => createGroupCommit(pool, { onFallback: (_, err) => fallbacks.push(err) }));
  // A transaction holding the middle key: both groups reach it and wait; when it rolls back, a group
  // that had taken the keys after it in reverse order would deadlock with the other one.
  let rollback!: () => void;
  const holding = blocker!
    .begin(async (tx) => {
      // The same key as the deliveries' row (sql/0027: provider, endpoint, event_id), inserted as a
      // delivery would be (state and payload rows), so their inserts wait on it.
      const held = await insertInbox(tx, [inboxRow({ provider: "stripe", endpoint: "billing", eventId: ids[4]! }, paid(ids[4]!), null)]);
      expect(held.size).toBe(1);
      await new Promise<void>((resolve) => (rollback = resolve));
      throw new Error("roll back");
    })
    .catch(() => {});
  await Bun.sleep(50);
  // One group per receiver: the first delivery of each is sent alone, so start each with a key of its own.
  const first = receivers.map((r, i) => r.receive(BILLING, paid(`evt_gc_order_lead_${i}`)));
  const forward = ids.map((id) => receivers[0]!.receive(BILLING, paid(id)));
  const backward = ids.toReversed().map((id) => receivers[1]!.receive(BILLING, paid(id)));
  await Promise.all(first);
  await Bun.sleep(300); // both groups now wait on the held key
  rollback();
  await holding;
  const outcomes = await Promise.all([...forward, ...backward]);
  expect(fallbacks).toEqual([]); // no deadlock sent a group to one-by-one inserts
  expect(outcomes.filter((o) => o === "queued").length).toBe(ids.length);
  expect(await count(db, "webhook_inbox", "event_id like 'evt_gc_order_%' and event_id not like '%lead%'")).toBe(ids.length);
});

test("`insertInbox()` writes each row's source: the event's own (api), else webhook", async () => {
  const fromApi = { ...paid("evt_grp_src_api"), source: "api" as const };
  const fromWebhook = paid("evt_grp_src_hook");
  const key = (eventId: string) => ({ provider: "stripe", endpoint: "billing", eventId });
  const inserted = await insertInbox(db, [
    inboxRow(key("evt_grp_src_api"), fromApi, null),
    inboxRow(key("evt_grp_src_hook"), fromWebhook, null),
  ]);
  expect(inserted.size).toBe(2);
  const rows = await db<{ event_id: string; source: string }[]>`
    select event_id, source from webhook_inbox where event_id in ('evt_grp_src_api', 'evt_grp_src_hook') order by event_id`;
  expect([...rows]).toEqual([
    { event_id: "evt_grp_src_api", source: "api" },
    { event_id: "evt_grp_src_hook", source: "webhook" },
  ]);
});
