// The outbox dispatcher against real PostgreSQL (seed §6, end: lease + fencing token):
// sql/0005_outbox_dispatch.sql, claimOutboxBatch, markPublished, recordDeliveryFailure, requeueOutbox,
// runDispatcher. One connection (or one pool) per concurrent actor; sinks are in-process functions
// (real HTTP is test/outbox/outbox-http.test.ts).
import { afterAll, beforeEach, describe, expect, test } from "bun:test";
import { connect, type Db } from "../../src/db/db.ts";
import type { Handler } from "../../src/handlers/handler-table.ts";
import { billingHandlers } from "../../src/handlers/billing.ts";
import { claimOutboxBatch, type OutboxClaimOptions, type OutboxMessage } from "../../src/outbox/claim.ts";
import { markPublished, recordDeliveryFailure, type SendFn } from "../../src/outbox/deliver-claimed.ts";
import { OUTBOX_CHANNEL, runDispatcher, type DispatcherOptions } from "../../src/outbox/dispatcher.ts";
import { handlerSink } from "../../src/outbox/handler-sink.ts";
import { requeueOutbox } from "../../src/ops/outbox.ts";
import { receiveSync } from "../../src/receiver/receive.ts";
import { closeAll, connections, count, eventBody, freshDatabase, invoice, verified } from "../support/helpers.ts";
import { waitUntil } from "../support/wait-until.ts";

const fresh = await freshDatabase();
const db = fresh.db;
afterAll(() => fresh.drop());
beforeEach(async () => {
  await db`truncate outbox, ledger_entries, invoices`;
});

/** A long backoff, so a failed row is surely not due again until a test makes it due. */
const BACKOFF = { baseMs: 60_000, capMs: 600_000 };
const CLAIM: OutboxClaimOptions = { limit: 10, leaseMs: 60_000, maxAttempts: 10 };
/** Per-test limit for tests that wait on other actors (bun's default is 5 s; the waits are bounded at 10–20 s). */
const WAITS = 30_000;

let facts = 0;

/**
 * Inserts one outbox row per aggregate (of `account`, default the platform's), each a fact of its own
 * (a message key of its own: message ids are unique, sql/0028); returns their ids.
 */
async function insertRows(aggregates: string[], eventType = "InvoicePaymentBooked", account = ""): Promise<string[]> {
  const ids: string[] = [];
  for (const aggregate of aggregates) {
    const [row] = await db<{ id: string }[]>`
      insert into outbox (account, aggregate_type, aggregate_id, event_type, message_key, payload)
      values (${account}, 'Invoice', ${aggregate}, ${eventType}, ${String(++facts)},
              ${db.json({ invoice_id: aggregate, amount: 2000, currency: "usd" })})
      returning id::text as id
    `;
    if (!row) throw new Error("Cannot insert an outbox row");
    ids.push(row.id);
  }
  return ids;
}

/** `n` rows, each for its own aggregate. */
function manyRows(n: number): Promise<string[]> {
  return insertRows(Array.from({ length: n }, (_, i) => `in_outbox_${i + 1}`));
}

interface OutboxRow {
  id: string;
  attempts: number;
  claim_token: string | null;
  published: boolean;
  needs_review: boolean;
  last_error: string | null;
  /** available_at > now(): leased or backing off. */
  later: boolean;
  available_at: string;
  published_at: string | null;
}

async function outboxRow(id: string): Promise<OutboxRow> {
  const [row] = await db<OutboxRow[]>`
    select id::text as id, attempts, claim_token::text as claim_token, published_at is not null as published,
           needs_review_at is not null as needs_review, last_error, available_at > now() as later,
           available_at::text as available_at, published_at::text as published_at
      from outbox
     where id = ${id}::bigint
  `;
  if (!row) throw new Error(`No outbox row ${id}`);
  return row;
}

/** Ends the lease of (or the backoff before) the given rows: they are due now. */
async function makeDue(ids: string[]): Promise<void> {
  await db`update outbox set available_at = now() - interval '1 ms' where id = any(${ids}::bigint[])`;
}

async function claimOne(claimDb: Db = db, options: Partial<OutboxClaimOptions> = {}): Promise<OutboxMessage> {
  const [message, ...rest] = await claimOutboxBatch(claimDb, { ...CLAIM, limit: 1, ...options });
  expect(rest).toEqual([]);
  if (!message) throw new Error("Cannot claim: no due outbox row");
  return message;
}

function dispatcherOptions(
  dispatchDb: Db,
  send: SendFn,
  signal: AbortSignal,
  overrides: Partial<DispatcherOptions> = {},
): DispatcherOptions {
  return { db: dispatchDb, send, signal, pollMs: 50, backoff: BACKOFF, log: () => {}, ...overrides };
}

/** A promise and the function that resolves it: a sink that blocks until the test releases it. */
function gate(): { opened: Promise<void>; open(): void } {
  let open = () => {};
  const opened = new Promise<void>((resolve) => {
    open = resolve;
  });
  return { opened, open };
}

const published = () => count(db, "outbox", "published_at is not null");

describe("sql/0005_outbox_dispatch.sql", () => {
  test("the billing handler's unchanged outbox insert gets the dispatch columns' defaults", async () => {
    const bookPayment = billingHandlers["invoice.paid"] as Handler;
    await db.begin((tx) =>
      bookPayment(tx, invoice({ id: "in_defaults", amount_paid: 2000, status: "paid" }), {
        provider: "stripe",
        endpoint: "billing",
        eventId: "evt_defaults",
        eventType: "invoice.paid",
      }),
    );
    const [row] = await db<
      {
        attempts: number;
        claim_token: string | null;
        due: boolean;
        last_error: string | null;
        needs_review_at: Date | null;
        published_at: Date | null;
      }[]
    >`
      select attempts, claim_token, available_at <= now() as due, last_error, needs_review_at, published_at from outbox
    `;
    expect(row).toEqual({ attempts: 0, claim_token: null, due: true, last_error: null, needs_review_at: null, published_at: null });
  });

  test("`receiveSync()` wakes `webhook_outbox` after a processed event's commit, not for a duplicate or a failure", async () => {
    const heard: string[] = [];
    const listener = await db.listen(OUTBOX_CHANNEL, (payload) => heard.push(payload));
    const target = { provider: "stripe", endpoint: "billing", handlers: billingHandlers };
    const paid = verified(eventBody("evt_wake_1", "invoice.paid", invoice({ id: "in_wake_1", amount_paid: 2000, status: "paid" })));
    try {
      expect(await receiveSync(db, target, paid)).toBe("processed");
      await waitUntil("the notification", async () => heard.length === 1);
      expect(await receiveSync(db, target, paid)).toBe("duplicate");
      const failing = {
        ...target,
        handlers: {
          "invoice.paid": async () => {
            throw new Error("roll back");
          },
        },
      };
      await receiveSync(db, failing, verified(eventBody("evt_wake_2", "invoice.paid", invoice({ id: "in_wake_2", status: "paid" })))).catch(
        () => {},
      );
      await receiveSync(
        db,
        target,
        verified(eventBody("evt_wake_3", "invoice.paid", invoice({ id: "in_wake_3", amount_paid: 2000, status: "paid" }))),
      );
      // Notifications arrive in order: had the duplicate or the failure notified, the count would be 3.
      await waitUntil("the second notification", async () => heard.length >= 2);
      await Bun.sleep(100);
      expect(heard).toEqual(["", ""]);
    } finally {
      await listener.unlisten();
    }
  });
});

describe("sql/0024_failover.sql message ids", () => {
  test("`claimOutboxBatch()` sends a payment re-booked after a failover (new row id, other event of the same payment) under its first message id", async () => {
    const target = { provider: "stripe", endpoint: "billing", handlers: billingHandlers };
    const paid = (eventId: string, type: string) =>
      verified(eventBody(eventId, type, invoice({ id: "in_stable_1", amount_paid: 2000, status: "paid" })));
    expect(await receiveSync(db, target, paid("evt_stable_paid", "invoice.paid"))).toBe("processed");
    const [before] = await claimOutboxBatch(db, CLAIM);
    // What a failover under asynchronous replication loses: the booking's commit. The recovery then applies
    // the payment's sibling event first; the identity sequence has moved on meanwhile.
    await db`truncate webhook_inbox, outbox, ledger_entries, invoices`;
    await db`select nextval(pg_get_serial_sequence('outbox', 'id')) from generate_series(1, 5)`;
    expect(await receiveSync(db, target, paid("evt_stable_succeeded", "invoice.payment_succeeded"))).toBe("processed");
    const [after] = await claimOutboxBatch(db, CLAIM);
    expect(after?.id).not.toBe(before?.id);
    expect(after?.messageId).toMatch(/^msg_[0-9a-f]{32}$/);
    expect(after?.messageId).toBe(before!.messageId);
  });

  test("`claimOutboxBatch()` keeps `msg_outbox_<id>` for a row written before sql/0024, and tells a message_key apart", async () => {
    const [legacy] = await db<{ id: string }[]>`
      insert into outbox (aggregate_type, aggregate_id, event_type, payload, message_id)
      values ('Invoice', 'in_legacy', 'InvoicePaymentBooked', '{}', null) returning id::text as id
    `;
    // A trigger sets message_id only when the insert leaves it null: null it again as the migration left old rows.
    await db`update outbox set message_id = null where id = ${legacy!.id}::bigint`;
    await db`
      insert into outbox (aggregate_type, aggregate_id, event_type, message_key, payload)
      values ('Subscription', 'sub_1', 'SubscriptionAccessStarted', '/evt_a', '{}'),
             ('Subscription', 'sub_1', 'SubscriptionAccessStarted', '/evt_b', '{}')
    `;
    const claimed = await claimOutboxBatch(db, CLAIM);
    expect(claimed.find((m) => m.id === legacy!.id)?.messageId).toBe(`msg_outbox_${legacy!.id}`);
    const subs = claimed.filter((m) => m.aggregateId === "sub_1").map((m) => m.messageId);
    expect(new Set(subs).size).toBe(2);
  });
});

describe("claimOutboxBatch()", () => {
  test("`claimOutboxBatch()` takes a new, strictly increasing fencing token per claim and hides the row for its lease", async () => {
    const ids = await manyRows(3);
    const [id1, id2, id3] = ids as [string, string, string];
    const first = await claimOutboxBatch(db, { ...CLAIM, limit: 2 });
    const written = await db<
      { message_id: string }[]
    >`select message_id from outbox where id in (${id1}::bigint, ${id2}::bigint) order by id`;
    expect(first.map((m) => [m.id, m.attempt, m.messageId])).toEqual([
      [id1, 1, written[0]!.message_id],
      [id2, 1, written[1]!.message_id],
    ]);
    const second = await claimOutboxBatch(db, CLAIM);
    expect(second.map((m) => m.id)).toEqual([id3]);
    expect(await claimOutboxBatch(db, CLAIM)).toEqual([]); // all leased
    for (const id of ids) expect(await outboxRow(id)).toMatchObject({ attempts: 1, later: true, published: false });

    await makeDue(ids);
    const third = await claimOutboxBatch(db, CLAIM);
    expect(third.map((m) => m.attempt)).toEqual([2, 2, 2]);
    // Each claim's tokens are new and above every token handed out before it.
    const batches = [first, second, third].map((batch) => batch.map((m) => m.token));
    expect(new Set(batches.flat()).size).toBe(6);
    for (let i = 1; i < batches.length; i++) {
      const earlier = batches.slice(0, i).flat();
      for (const token of batches[i] as bigint[]) expect(earlier.every((t) => token > t)).toBe(true);
    }
    for (const m of third) expect((await outboxRow(m.id)).claim_token).toBe(m.token.toString());
  });

  test("`claimOutboxBatch()` claims each due row once across concurrent claimers (SKIP LOCKED)", async () => {
    await manyRows(40);
    const actors = connections(fresh.url, 4);
    try {
      const batches = await Promise.all(actors.map((a) => claimOutboxBatch(a, { ...CLAIM, limit: 15 })));
      const claimed = batches.flat();
      expect(claimed.length).toBe(40);
      expect(new Set(claimed.map((m) => m.id)).size).toBe(40);
      expect(new Set(claimed.map((m) => m.token)).size).toBe(40);
    } finally {
      await closeAll(actors);
    }
  });

  test("`claimOutboxBatch()` parks a due row whose attempts were all used by dispatchers that died, instead of claiming it", async () => {
    const [dead, healthy] = (await manyRows(2)) as [string, string];
    await db`update outbox set attempts = 3 where id = ${dead}::bigint`;
    const claimed = await claimOutboxBatch(db, { ...CLAIM, maxAttempts: 3 });
    expect(claimed.map((m) => m.id)).toEqual([healthy]);
    const row = await outboxRow(dead);
    expect(row).toMatchObject({ attempts: 3, needs_review: true, published: false });
    expect(row.last_error).toContain("attempt limit 3 reached");
    await makeDue([dead]);
    expect(await claimOutboxBatch(db, { ...CLAIM, maxAttempts: 10 })).toEqual([]); // parked means parked
  });

  test("`claimOutboxBatch()` with `ordered` claims only each aggregate's head; a parked head blocks its aggregate until requeued", async () => {
    const [a1, a2, b1, a3] = (await insertRows(["in_a", "in_a", "in_b", "in_a"])) as [string, string, string, string];
    const ordered = { ...CLAIM, ordered: true };
    const heads = await claimOutboxBatch(db, ordered);
    expect(heads.map((m) => m.id)).toEqual([a1, b1]);
    expect(await claimOutboxBatch(db, ordered)).toEqual([]); // a2 waits for a1, which is leased

    const claimA1 = heads[0] as OutboxMessage;
    expect(await markPublished(db, claimA1.id, claimA1.token)).toBe(true);
    const claimA2 = await claimOne(db, ordered);
    expect(claimA2.id).toBe(a2);
    expect(await recordDeliveryFailure(db, claimA2, "Error: poisoned", true, { maxAttempts: 10, backoff: BACKOFF })).toBe("needs_review");

    await makeDue([a2, a3, b1]);
    expect((await claimOutboxBatch(db, ordered)).map((m) => m.id)).toEqual([b1]); // a3 is blocked by parked a2
    expect((await claimOutboxBatch(db, { ...CLAIM, ordered: false })).map((m) => m.id)).toEqual([a3]); // unordered would overtake

    await db`update outbox set claim_token = null, attempts = 0, available_at = now() where id = ${a3}::bigint`;
    expect(await requeueOutbox(db, [a2, a3])).toEqual([a2]); // only parked rows are requeued
    expect((await claimOutboxBatch(db, ordered)).map((m) => m.id)).toEqual([a2]);
  });

  test("`claimOutboxBatch()` with `ordered` keeps accounts apart: account A's parked head does not block account B's message of the same aggregate id", async () => {
    const [parkedA] = (await insertRows(["in_same"], "InvoicePaymentBooked", "acct_A")) as [string];
    await db`update outbox set needs_review_at = now() where id = ${parkedA}::bigint`;
    const [laterA] = (await insertRows(["in_same"], "InvoicePaymentBooked", "acct_A")) as [string];
    const [ofB] = (await insertRows(["in_same"], "InvoicePaymentBooked", "acct_B")) as [string];
    const [platform] = (await insertRows(["in_same"])) as [string];
    expect((await claimOutboxBatch(db, { ...CLAIM, ordered: true })).map((m) => m.id)).toEqual([ofB, platform]);
    expect(await outboxRow(laterA)).toMatchObject({ attempts: 0, published: false }); // still behind A's parked head
  });
});

describe("markPublished() and recordDeliveryFailure()", () => {
  test("a claim that parks a row at its attempt limit fences off the dispatcher whose lease expired: its mark and its failure are stale", async () => {
    const [id] = (await manyRows(1)) as [string];
    const claimA = await claimOne(db, { maxAttempts: 1 }); // A's only attempt; A stalls past its lease
    await makeDue([id]);
    expect(await claimOutboxBatch(db, { ...CLAIM, maxAttempts: 1 })).toEqual([]); // parks the row
    const parked = await outboxRow(id);
    expect(parked).toMatchObject({ published: false, attempts: 1 });
    expect(parked.last_error).toContain("attempt limit 1 reached");
    expect(BigInt(parked.claim_token ?? "0") > claimA.token).toBe(true);

    expect(await recordDeliveryFailure(db, claimA, "DeliveryTimeoutError: late", false, { maxAttempts: 1, backoff: BACKOFF })).toBe(
      "stale",
    );
    expect(await markPublished(db, id, claimA.token)).toBe(false);
    expect(await outboxRow(id)).toEqual(parked);
  });

  test("`markPublished()` with the token of a claim whose lease expired returns false and changes nothing; the new owner's mark takes once", async () => {
    const [dbA, dbB] = connections(fresh.url, 2) as [Db, Db];
    try {
      const [id] = (await manyRows(1)) as [string];
      const claimA = await claimOne(dbA); // A claims, then stalls past its lease
      await makeDue([id]);
      const claimB = await claimOne(dbB);
      expect(claimB.id).toBe(id);
      expect(claimB.token > claimA.token).toBe(true);
      const ownedByB = await outboxRow(id);
      expect(ownedByB).toMatchObject({ attempts: 2, claim_token: claimB.token.toString(), published: false, later: true });

      expect(await markPublished(dbA, id, claimA.token)).toBe(false);
      expect(await recordDeliveryFailure(dbA, claimA, "Error: stale A", false, { maxAttempts: 10, backoff: BACKOFF })).toBe("stale");
      expect(await recordDeliveryFailure(dbA, claimA, "Error: stale A", true, { maxAttempts: 10, backoff: BACKOFF })).toBe("stale");
      expect(await outboxRow(id)).toEqual(ownedByB);

      expect(await markPublished(dbB, id, claimB.token)).toBe(true);
      const done = await outboxRow(id);
      expect(done).toMatchObject({ published: true, claim_token: claimB.token.toString(), last_error: null });
      expect(await markPublished(dbB, id, claimB.token)).toBe(false); // published once
      expect(await markPublished(dbA, id, claimA.token)).toBe(false);
      expect(await outboxRow(id)).toEqual(done);
    } finally {
      await closeAll([dbA, dbB]);
    }
  });

  test("`recordDeliveryFailure()` stores the error and a backoff, and parks at the attempt limit", async () => {
    const [id] = (await manyRows(1)) as [string];
    const options = { maxAttempts: 2, backoff: BACKOFF };
    expect(await recordDeliveryFailure(db, await claimOne(), "Error: down", false, options)).toBe("failed");
    expect(await outboxRow(id)).toMatchObject({ attempts: 1, last_error: "Error: down", later: true, needs_review: false });
    const [delay] = await db<{ s: number }[]>`select extract(epoch from available_at - now())::float8 as s from outbox`;
    expect(delay?.s).toBeGreaterThan(25); // 60 s base × jitter in [0.5, 1)
    await makeDue([id]);
    expect(await recordDeliveryFailure(db, await claimOne(), "Error: still down", false, options)).toBe("needs_review");
    expect(await outboxRow(id)).toMatchObject({ attempts: 2, last_error: "Error: still down", needs_review: true, published: false });
  });
});

describe("runDispatcher()", () => {
  test(
    "`runDispatcher()` ×2 racing over 200 rows delivers each row, publishes it once, and no stale token marks a row",
    async () => {
      const ids = await manyRows(200);
      const deliveries = new Map<string, number>();
      const deliveredBy = new Map<string, Set<string>>();
      const sinkFor =
        (name: string): SendFn =>
        async (message) => {
          deliveries.set(message.id, (deliveries.get(message.id) ?? 0) + 1);
          const by = deliveredBy.get(name) ?? new Set<string>();
          by.add(message.id);
          deliveredBy.set(name, by);
          await Bun.sleep(Math.random() * 3);
        };
      const lines: (Record<string, unknown> & { dispatcher_name: string })[] = [];
      const controller = new AbortController();
      const pools = ["A", "B"].map((name) => ({ name, pool: connect(fresh.url, { max: 1 }) }));
      const dispatchers = pools.map(({ name, pool }) =>
        runDispatcher(
          dispatcherOptions(pool, sinkFor(name), controller.signal, {
            concurrency: 4,
            log: (line) => lines.push({ ...line, dispatcher_name: name }),
          }),
        ),
      );
      try {
        await waitUntil("200 published rows", async () => (await published()) === 200, { timeoutMs: 20_000 });
      } finally {
        controller.abort();
        await Promise.all(dispatchers);
        await closeAll(pools.map((p) => p.pool));
      }
      // Every row delivered; with a 60 s lease nothing expired, so nothing was delivered twice.
      expect([...deliveries.keys()].sort()).toEqual([...ids].sort());
      expect([...deliveries.values()].every((n) => n === 1)).toBe(true);
      expect(deliveredBy.get("A")?.size).toBeGreaterThan(0);
      expect(deliveredBy.get("B")?.size).toBeGreaterThan(0);
      // Published once each, by the claim that owned the row (the row's last token), never by a stale one.
      const publishedLines = lines.filter((l) => l.outcome === "published");
      expect(publishedLines.length).toBe(200);
      expect(new Set(publishedLines.map((l) => l.outbox_id)).size).toBe(200);
      expect(lines.filter((l) => l.outcome !== "published")).toEqual([]);
      const rows = await db<
        { id: string; claim_token: string; attempts: number }[]
      >`select id::text as id, claim_token::text as claim_token, attempts from outbox`;
      const tokenOf = new Map(rows.map((r) => [r.id, r.claim_token]));
      for (const line of publishedLines) expect(line.token).toBe(tokenOf.get(line.outbox_id as string) as string);
      expect(rows.every((r) => r.attempts === 1)).toBe(true);
      expect(await count(db, "outbox", "published_at is null or needs_review_at is not null or last_error is not null")).toBe(0);
    },
    WAITS,
  );

  test(
    "`runDispatcher()` paused past its lease cannot mark the row another dispatcher claimed with a new token",
    async () => {
      const [id] = (await manyRows(1)) as [string];
      const gateA = gate();
      const gateB = gate();
      const tokens: Record<string, bigint> = {};
      const blockingSink =
        (name: "A" | "B", g: { opened: Promise<void> }): SendFn =>
        async (message) => {
          tokens[name] = message.token;
          await g.opened;
        };
      const lines: Record<string, unknown>[] = [];
      const controller = new AbortController();
      const [poolA, poolB] = [connect(fresh.url, { max: 1 }), connect(fresh.url, { max: 1 })];
      // One slot: while A is paused in its sink it claims nothing else (not even this row once it is due again).
      const a = runDispatcher(
        dispatcherOptions(poolA, blockingSink("A", gateA), controller.signal, {
          concurrency: 1,
          log: (l) => lines.push({ ...l, by: "A" }),
        }),
      );
      let b: Promise<void> | undefined;
      try {
        await waitUntil("A delivering the row", async () => tokens.A !== undefined);
        // A is paused in its sink. Its lease runs out (the test ends it instead of waiting 60 s) …
        await makeDue([id]);
        // … and B claims the row with a new token and starts delivering it too.
        b = runDispatcher(
          dispatcherOptions(poolB, blockingSink("B", gateB), controller.signal, { log: (l) => lines.push({ ...l, by: "B" }) }),
        );
        await waitUntil("B delivering the row", async () => tokens.B !== undefined);
        expect((tokens.B as bigint) > (tokens.A as bigint)).toBe(true);
        const ownedByB = await outboxRow(id);
        expect(ownedByB).toMatchObject({ attempts: 2, claim_token: String(tokens.B), published: false, later: true });

        // A resumes: its sink returns, its markPublished is refused, and B's row is untouched.
        gateA.open();
        await waitUntil("A's stale outcome", async () => lines.some((l) => l.by === "A" && l.outcome !== undefined));
        expect(lines.filter((l) => l.by === "A")).toEqual([
          expect.objectContaining({ outbox_id: id, outcome: "stale", token: String(tokens.A) }),
        ]);
        expect(await outboxRow(id)).toEqual(ownedByB);

        gateB.open();
        await waitUntil("B publishing the row", async () => (await outboxRow(id)).published);
        expect(await outboxRow(id)).toMatchObject({ published: true, claim_token: String(tokens.B), attempts: 2 });
        expect(lines.filter((l) => l.outcome !== undefined).map((l) => `${l.by} ${l.outcome}`)).toEqual(["A stale", "B published"]);
      } finally {
        gateA.open();
        gateB.open();
        controller.abort();
        await Promise.all([a, b]);
        await closeAll([poolA, poolB]);
      }
    },
    WAITS,
  );

  test(
    "`runDispatcher()` delivers a row whose sink fails twice then recovers, after a backoff each time",
    async () => {
      const [id] = (await manyRows(1)) as [string];
      const calls: { at: number; lastError: string | null }[] = [];
      const flaky: SendFn = async () => {
        calls.push({ at: performance.now(), lastError: (await outboxRow(id)).last_error });
        if (calls.length <= 2) throw new Error("Downstream is down");
      };
      const lines: Record<string, unknown>[] = [];
      const controller = new AbortController();
      const pool = connect(fresh.url, { max: 2 });
      const dispatcher = runDispatcher(
        dispatcherOptions(pool, flaky, controller.signal, {
          backoff: { baseMs: 200, capMs: 1_000 },
          pollMs: 20,
          listen: false,
          log: (l) => lines.push(l),
        }),
      );
      try {
        await waitUntil("the row published", async () => (await outboxRow(id)).published);
      } finally {
        controller.abort();
        await dispatcher;
        await pool.end({ timeout: 5 });
      }
      expect(calls.map((c) => c.lastError)).toEqual([null, "Error: Downstream is down", "Error: Downstream is down"]);
      // Jittered backoff: base · 2^(attempts-1) · [0.5, 1) → at least 100 ms, then at least 200 ms.
      const [c1, c2, c3] = calls.map((c) => c.at) as [number, number, number];
      expect(c2 - c1).toBeGreaterThanOrEqual(100);
      expect(c3 - c2).toBeGreaterThanOrEqual(200);
      expect(lines.map((l) => [l.attempt, l.outcome, l.error])).toEqual([
        [1, "failed", "Error: Downstream is down"],
        [2, "failed", "Error: Downstream is down"],
        [3, "published", undefined],
      ]);
      expect(await outboxRow(id)).toMatchObject({ attempts: 3, published: true, last_error: null, needs_review: false });
    },
    WAITS,
  );

  test(
    "`runDispatcher()` parks a row after `maxAttempts` failures and an unknown type at once; `requeueOutbox()` brings them back",
    async () => {
      const [failing] = (await insertRows(["in_failing"], "InvoicePaymentBooked")) as [string];
      const [unknown] = (await insertRows(["in_unknown"], "SomethingNobodyHandles")) as [string];
      let healthy = false;
      const handlers = {
        InvoicePaymentBooked: async () => {
          if (!healthy) throw new Error("Mail server refuses connections");
        },
      };
      const controller = new AbortController();
      const pool = connect(fresh.url, { max: 2 });
      const lines: Record<string, unknown>[] = [];
      const options = dispatcherOptions(pool, handlerSink(handlers), controller.signal, {
        maxAttempts: 3,
        backoff: { baseMs: 10, capMs: 20 },
        pollMs: 20,
        log: (l) => lines.push(l),
      });
      const dispatcher = runDispatcher(options);
      try {
        await waitUntil("both rows parked", async () => (await count(db, "outbox", "needs_review_at is not null")) === 2);
        expect(await outboxRow(failing)).toMatchObject({
          attempts: 3,
          needs_review: true,
          published: false,
          last_error: "Error: Mail server refuses connections",
        });
        expect(await outboxRow(unknown)).toMatchObject({
          attempts: 1,
          needs_review: true,
          published: false,
          last_error: "PermanentError: No outbox handler for SomethingNobodyHandles",
        });
        expect(lines.map((l) => `${l.outbox_id} ${l.attempt} ${l.outcome}`).sort()).toEqual(
          [`${failing} 1 failed`, `${failing} 2 failed`, `${failing} 3 needs_review`, `${unknown} 1 needs_review`].sort(),
        );
        await makeDue([failing, unknown]);
        expect(await claimOutboxBatch(db, CLAIM)).toEqual([]);

        healthy = true;
        expect(await requeueOutbox(db, [failing])).toEqual([failing]);
        await waitUntil("the requeued row published", async () => (await outboxRow(failing)).published);
        expect(await outboxRow(failing)).toMatchObject({ attempts: 1, needs_review: false, last_error: null });
        expect(await outboxRow(unknown)).toMatchObject({ needs_review: true, published: false });
      } finally {
        controller.abort();
        await dispatcher;
        await pool.end({ timeout: 5 });
      }
    },
    WAITS,
  );

  test(
    "`runDispatcher()` ×2 with `ordered` delivers each aggregate's rows one at a time, in id order",
    async () => {
      const aggregates = ["in_x", "in_y", "in_z"];
      const ids = await insertRows(Array.from({ length: 18 }, (_, i) => aggregates[i % 3] as string));
      const order = new Map<string, string[]>();
      const busy = new Set<string>();
      const overlaps: string[] = [];
      const sink: SendFn = async (message) => {
        if (busy.has(message.aggregateId)) overlaps.push(`${message.aggregateId} ${message.id}`);
        busy.add(message.aggregateId);
        await Bun.sleep(Math.random() * 10);
        order.set(message.aggregateId, [...(order.get(message.aggregateId) ?? []), message.id]);
        busy.delete(message.aggregateId);
      };
      const controller = new AbortController();
      const pools = [connect(fresh.url, { max: 1 }), connect(fresh.url, { max: 1 })];
      const dispatchers = pools.map((pool) =>
        runDispatcher(dispatcherOptions(pool, sink, controller.signal, { ordered: true, concurrency: 4, pollMs: 20 })),
      );
      try {
        await waitUntil("18 published rows", async () => (await published()) === 18, { timeoutMs: 20_000 });
      } finally {
        controller.abort();
        await Promise.all(dispatchers);
        await closeAll(pools);
      }
      expect(overlaps).toEqual([]);
      aggregates.forEach((aggregate, k) => {
        expect(order.get(aggregate)).toEqual(ids.filter((_, i) => i % 3 === k));
      });
    },
    WAITS,
  );

  test(
    "`runDispatcher()` wakes on the NOTIFY sent after a processed event's commit while it is idle, well before its 30 s poll",
    async () => {
      const delivered: string[] = [];
      const controller = new AbortController();
      const application = "outbox-notify-test";
      const pool = connect(fresh.url, { max: 2, applicationName: application });
      const dispatcher = runDispatcher(
        dispatcherOptions(pool, async (m) => void delivered.push(m.aggregateId), controller.signal, { pollMs: 30_000 }),
      );
      try {
        await waitUntil("the dispatcher listening and idle", async () => {
          const [row] = await db<{ listening: number; claimed: number }[]>`
          select count(*) filter (where query ilike 'listen%')::int as listening,
                 count(*) filter (where query ilike '%with picked as%' and state = 'idle')::int as claimed
            from pg_stat_activity
           where application_name = ${application}
             and datname = current_database()
        `;
          return row?.listening === 1 && row.claimed >= 1;
        });
        await receiveSync(
          db,
          { provider: "stripe", endpoint: "billing", handlers: billingHandlers },
          verified(eventBody("evt_notified", "invoice.paid", invoice({ id: "in_notified", amount_paid: 2000, status: "paid" }))),
        );
        await waitUntil("the new row delivered", async () => (await published()) === 1, { timeoutMs: 10_000 });
        expect(delivered).toEqual(["in_notified"]);
      } finally {
        controller.abort();
        await dispatcher;
        await pool.end({ timeout: 5 });
      }
    },
    WAITS,
  );

  test(
    "`runDispatcher()` resolves after abort only once the in-flight delivery is published",
    async () => {
      const [id] = (await manyRows(1)) as [string];
      const order: string[] = [];
      const slow: SendFn = async () => {
        order.push("send started");
        await Bun.sleep(300);
        order.push("send finished");
      };
      const controller = new AbortController();
      const pool = connect(fresh.url, { max: 2 });
      try {
        const dispatcher = runDispatcher(dispatcherOptions(pool, slow, controller.signal, { pollMs: 30_000, listen: false }));
        await waitUntil("the delivery in flight", async () => order.length > 0);
        controller.abort();
        order.push("aborted");
        await dispatcher;
        order.push("runDispatcher resolved");
        expect(order).toEqual(["send started", "aborted", "send finished", "runDispatcher resolved"]);
        expect(await outboxRow(id)).toMatchObject({ attempts: 1, published: true });
      } finally {
        controller.abort();
        await pool.end({ timeout: 5 });
      }
    },
    WAITS,
  );

  test(
    "`runDispatcher()` fails a send that outlives its timeout, aborting the send's signal",
    async () => {
      const [id] = (await manyRows(1)) as [string];
      let abortedWith: unknown;
      const hanging: SendFn = (_, { signal }) =>
        new Promise((_resolve, reject) => {
          signal.addEventListener("abort", () => {
            abortedWith = signal.reason;
            reject(signal.reason);
          });
        });
      const lines: Record<string, unknown>[] = [];
      const controller = new AbortController();
      const pool = connect(fresh.url, { max: 2 });
      const dispatcher = runDispatcher(
        dispatcherOptions(pool, hanging, controller.signal, { timeoutMs: 100, leaseMs: 10_000, listen: false, log: (l) => lines.push(l) }),
      );
      try {
        await waitUntil("the failure recorded", async () => (await outboxRow(id)).last_error !== null);
      } finally {
        controller.abort();
        await dispatcher;
        await pool.end({ timeout: 5 });
      }
      expect((abortedWith as Error).name).toBe("DeliveryTimeoutError");
      expect(await outboxRow(id)).toMatchObject({
        attempts: 1,
        published: false,
        needs_review: false,
        later: true,
        last_error: "DeliveryTimeoutError: Sink did not answer within 100 ms",
      });
      expect(lines).toEqual([
        expect.objectContaining({ outcome: "failed", error: "DeliveryTimeoutError: Sink did not answer within 100 ms" }),
      ]);
    },
    WAITS,
  );

  test("`runDispatcher()` refuses a timeout that is not shorter than the lease", async () => {
    const controller = new AbortController();
    await expect(
      runDispatcher(dispatcherOptions(db, async () => {}, controller.signal, { timeoutMs: 1_000, leaseMs: 1_000 })),
    ).rejects.toThrow("Dispatcher timeout (1000 ms) must be shorter than the lease (1000 ms)");
  });
});
