// One delivery's trouble stays its own (review of bf4a976, R1, R2, R7): a row lock, a refused event or a
// statement past its bound never holds, fails or records behind the back of an unrelated delivery, and
// every piece of database work holds a slot of the receiver's limiter while it runs.
import { afterAll, beforeEach, expect, test } from "bun:test";
import { connect, type Db } from "../../src/db/db.ts";
import { createApp } from "../../src/receiver/app.ts";
import { stripeEndpoints } from "../../src/receiver/endpoints.ts";
import type { Mode } from "../../src/receiver/receive.ts";
import { count, eventBody, freshDatabase, invoice, SECRET, signedRequest } from "../support/helpers.ts";
import { waitUntil } from "../support/wait-until.ts";

const fresh = await freshDatabase();
const db = fresh.db;
const pools: Db[] = [];
afterAll(async () => {
  await Promise.all(pools.map((p) => p.end({ timeout: 5 })));
  await fresh.drop();
});
beforeEach(async () => {
  await db`truncate webhook_inbox, outbox, ledger_entries, invoices`;
});

function pool(max: number): Db {
  const p = connect(fresh.url, { max });
  pools.push(p);
  return p;
}

/** A receiver as production wires it: `slots` deliveries using the database at once on a pool of `slots + 1`. */
function receiver(mode: Mode, slots: number, settings: { queueTimeoutMs?: number; statementTimeoutMs?: number } = {}) {
  return createApp({
    db: pool(slots + 1),
    endpoints: stripeEndpoints([{ name: "billing", secrets: [SECRET], mode }]),
    log: () => {},
    maxInFlight: slots,
    ...settings,
  });
}

const paid = (eventId: string, invoiceId: string, currency = "usd") =>
  eventBody(eventId, "invoice.paid", invoice({ id: invoiceId, status: "paid", currency, amount_due: 2000, amount_paid: 2000 }));

/** Posts `body` (or a request signed already); resolves with the status and outcome (or error code) and when the answer came, ms after `t0`. */
async function post(app: ReturnType<typeof createApp>, body: string | Request, t0: number) {
  const request = typeof body === "string" ? await signedRequest("http://receiver.test/webhooks/stripe", body) : body;
  const res = await app.fetch(request);
  const json = (await res.json()) as { outcome?: string; error?: string };
  return { status: res.status, answer: json.outcome ?? json.error, atMs: Date.now() - t0 };
}

/** Backends of the test database waiting on a lock now. */
async function lockWaiters(): Promise<number> {
  const [row] = await db<{ n: number }[]>`
    select count(*)::int as n from pg_stat_activity where datname = current_database() and wait_event_type = 'Lock'`;
  return row?.n ?? 0;
}

test("`createApp()` with 3 slots and 8 deliveries waiting on one locked invoice never runs more than 3 at once, and answers an unrelated delivery within the queue timeout (review R1)", async () => {
  const app = receiver("sync", 3, { queueTimeoutMs: 500, statementTimeoutMs: 8_000 });
  await db`insert into invoices (id, customer_id, status, currency, amount_due) values ('in_hot', 'cus_1', 'open', 'usd', 2000)`;
  const locker = pool(1);
  const t0 = Date.now();
  let hot: Promise<{ status: number; answer?: string }>[] = [];
  let unrelated: { status: number; answer?: string; atMs: number } | undefined;
  let waiting = 0;
  await locker.begin(async (tx) => {
    await tx`select 1 from invoices where id = 'in_hot' for update`;
    // A retry burst for one invoice (a worker or a backfill holds its row).
    hot = Array.from({ length: 8 }, (_, i) => post(app, paid(`evt_hot_${i}`, "in_hot"), t0));
    await waitUntil("three deliveries waiting on the lock", async () => (await lockWaiters()) >= 3);
    await Bun.sleep(1_200); // long enough for any delivery set aside from a stalled group to start
    waiting = await lockWaiters();
    const started = Date.now();
    unrelated = await post(app, paid("evt_cold", "in_cold"), started);
  });
  // Never more database work than slots, and the unrelated delivery was answered by the limiter (503
  // overloaded, retried by the sender) or by the database, never held behind a lock waiter.
  expect(waiting).toBe(3);
  expect(unrelated!.atMs).toBeLessThan(1_500);
  expect(["200 processed", "503 overloaded"]).toContain(`${unrelated!.status} ${unrelated!.answer}`);
  // Once the lock is gone, the invoice is booked once; no delivery was acknowledged without its row.
  const answers = await Promise.all(hot);
  expect(answers.filter((a) => a.status === 200).length).toBeGreaterThan(0);
  expect(await count(db, "ledger_entries", "invoice_id = 'in_hot'")).toBe(1);
  const acknowledged = answers.filter((a) => a.status === 200).length;
  expect(await count(db, "webhook_inbox", "event_id like 'evt_hot_%'")).toBeGreaterThanOrEqual(acknowledged);
}, 30_000);

test("`createApp()` answers deliveries of unrelated invoices at once while a refused event and one for a locked invoice arrive with them (review R7)", async () => {
  const app = receiver("sync", 8, { statementTimeoutMs: 3_000 });
  // Invoice ids sort in arrival order (a batch of deliveries that takes locks in key order would meet them so).
  await db`insert into invoices (id, customer_id, status, currency, amount_due) values
    ('in_a_bad', 'cus_1', 'open', 'eur', 2000), ('in_b_locked', 'cus_1', 'open', 'usd', 2000)`;
  const locker = pool(1);
  const sign = (body: string) => signedRequest("http://receiver.test/webhooks/stripe", body);
  const requests = await Promise.all([
    sign(paid("evt_first_1", "in_0_first_1")),
    sign(paid("evt_first_2", "in_0_first_2")),
    sign(paid("evt_bad", "in_a_bad", "usd")), // currency differs from the invoice's: refused in SQL
    sign(paid("evt_locked", "in_b_locked")), // waits on the row lock
    ...["c1", "c2", "c3"].map((c) => sign(paid(`evt_${c}`, `in_c_${c}`))),
  ]);
  const t0 = Date.now();
  let answers: Promise<Awaited<ReturnType<typeof post>>>[] = [];
  await locker.begin(async (tx) => {
    await tx`select 1 from invoices where id = 'in_b_locked' for update`;
    answers = requests.map((request) => post(app, request, t0)); // all in one tick
    await Promise.all([...answers.slice(0, 3), ...answers.slice(4)]);
    await Bun.sleep(200);
  });
  const [first1, first2, bad, locked, ...unrelated] = await Promise.all(answers);
  expect([first1!.answer, first2!.answer]).toEqual(["processed", "processed"]);
  expect(`${bad!.status} ${bad!.answer}`).toBe("200 needs_review");
  for (const a of unrelated) {
    expect(`${a.status} ${a.answer}`).toBe("200 processed");
    expect(a.atMs).toBeLessThan(1_000);
  }
  expect(`${locked!.status} ${locked!.answer}`).toBe("200 processed"); // its lock was released before its bound
  expect(await count(db, "ledger_entries")).toBe(6);
}, 30_000);

test("`createApp()` in async mode answers what the database did while its connection is held up: every 2xx has its row, every 5xx none, and nothing is redone row by row (review R2)", async () => {
  const lines: Record<string, unknown>[] = [];
  const busy = pool(1);
  const app = createApp({
    db: busy,
    endpoints: stripeEndpoints([{ name: "billing", secrets: [SECRET], mode: "async" }]),
    log: (line) => lines.push(line),
    maxInFlight: 1,
    queueTimeoutMs: 300,
    statementTimeoutMs: 400,
  });
  const ids = ["evt_r2_1", "evt_r2_2", "evt_r2_3", "evt_r2_4"];
  const requests = await Promise.all(ids.map((id) => signedRequest("http://receiver.test/webhooks/stripe", paid(id, `in_${id}`))));
  const t0 = Date.now();
  // The receiver's only connection is busy for 1.5 s (a slow statement, a stalled server): the
  // deliveries' inserts queue behind it.
  const held = busy`select pg_sleep(1.5)`.execute();
  await Bun.sleep(50);
  const settled = await Promise.all(requests.map((request) => post(app, request, t0)));
  await held;
  await Bun.sleep(1_000); // anything sent meanwhile has run by now
  const recorded = new Set((await db<{ event_id: string }[]>`select event_id from webhook_inbox`).map((r) => r.event_id));
  for (const [i, a] of settled.entries()) {
    if (a.status === 200) expect(recorded.has(ids[i]!)).toBe(true);
    else expect({ id: ids[i], recorded: recorded.has(ids[i]!) }).toEqual({ id: ids[i], recorded: false });
  }
  expect(settled.map((a) => `${a.status} ${a.answer}`).sort()).toEqual(["200 queued", "503 overloaded", "503 overloaded", "503 overloaded"]);
  expect(lines.filter((l) => "group_fallback" in l)).toEqual([]);
}, 30_000);
