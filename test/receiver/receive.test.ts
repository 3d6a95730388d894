// receiveSync (sync mode, seed §5.3) against real PostgreSQL: the seed's §10 sync table and more.
// One connection per concurrent actor (helpers `connections`); every test uses its own invoice and
// event ids, so the tests share one database without seeing each other's rows.
import { afterAll, beforeAll, expect, test } from "bun:test";
import type { Db } from "../../src/db/db.ts";
import { mulberry32, shuffleInPlace } from "../../src/dev/random.ts";
import { PermanentError, type Handler, type HandlerTable } from "../../src/handlers/handler-table.ts";
import { billingHandlers } from "../../src/handlers/billing.ts";
import { receiveSync, type Outcome, type ReceiveTarget } from "../../src/receiver/receive.ts";
import { closeAll, connections, count, eventBody, fixture, freshDatabase, invoice, lifecycle, verified } from "../support/helpers.ts";
import { waitUntil } from "../support/wait-until.ts";

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

/** Bun's default 5 s per test is too tight for the concurrent tests' bounded waits (10 s); a bound, not a speed assertion. */
const CONCURRENT_TEST_TIMEOUT_MS = 30_000;

/** Receives one body on `actor` (default: the shared pool). */
function receive(body: string, options: { actor?: Db; target?: ReceiveTarget } = {}): Promise<Outcome> {
  return receiveSync(options.actor ?? db, options.target ?? BILLING, verified(body));
}

/** `n` connected single-connection pools (connected up front so concurrent deliveries start together), closed in afterAll. */
async function connectedActors(n: number): Promise<Db[]> {
  const group = connections(fresh.url, n);
  actors.push(group);
  await Promise.all(group.map((actor) => actor`select 1`));
  return group;
}

async function backendPid(actor: Db): Promise<number> {
  const [row] = await actor`select pg_backend_pid() as pid`;
  return row?.pid as number;
}

const STATUS_OF: Record<string, string> = {
  "invoice.created": "draft",
  "invoice.finalized": "open",
  "invoice.marked_uncollectible": "uncollectible",
  "invoice.voided": "void",
  "invoice.paid": "paid",
  "invoice.payment_succeeded": "paid",
};

/** A Stripe invoice event body for `invoiceId`, its `status` and `amount_paid` as Stripe would send for `type`. */
function invoiceEvent(eventId: string, type: string, invoiceId: string, amountDue = 2000, overrides: Record<string, unknown> = {}): string {
  const status = STATUS_OF[type] ?? "draft";
  return eventBody(
    eventId,
    type,
    invoice({ id: invoiceId, status, amount_due: amountDue, amount_paid: status === "paid" ? amountDue : 0, ...overrides }),
  );
}

/** Everything receiveSync may have written about one invoice. Amounts as numbers. */
async function invoiceState(invoiceId: string) {
  const [row] = await db`select status, amount_paid::int as "amountPaid" from invoices where id = ${invoiceId}`;
  const ledger = await db`
    select amount::int, currency, event_id as "eventId"
      from ledger_entries
     where invoice_id = ${invoiceId}
     order by id
  `;
  return {
    status: (row?.status as string | undefined) ?? null,
    amountPaid: (row?.amountPaid as number | undefined) ?? null,
    ledger: ledger.map((r) => ({ amount: r.amount as number, currency: r.currency as string, eventId: r.eventId as string })),
    bookings: await count(db, "outbox", `aggregate_id = '${invoiceId}' and event_type = 'InvoicePaymentBooked'`),
  };
}

/** Inbox rows of one event id, across endpoints. */
async function inboxRows(eventId: string) {
  const rows = await db`
    select endpoint, outcome, processed_at is not null as processed
      from webhook_inbox
     where provider = 'stripe'
       and event_id = ${eventId}
     order by endpoint
  `;
  return rows.map((r) => ({ endpoint: r.endpoint as string, outcome: r.outcome as string, processed: r.processed as boolean }));
}

/** The real invoice.paid handler (a table without it is a test bug). */
function realPaidHandler(): Handler {
  const handler = billingHandlers["invoice.paid"];
  if (!handler) throw new Error("Cannot find handler: billingHandlers has no invoice.paid");
  return handler;
}

/** Delivers `bodies` in order through `n` connections, each taking the next body when free; outcomes by event id. */
async function deliverConcurrently(bodies: readonly string[], group: Db[]): Promise<Map<string, Outcome[]>> {
  const outcomes = new Map<string, Outcome[]>();
  let next = 0;
  await Promise.all(
    group.map(async (actor) => {
      for (let body = bodies[next++]; body !== undefined; body = bodies[next++]) {
        const event = verified(body);
        const outcome = await receiveSync(actor, BILLING, event);
        outcomes.set(event.id, [...(outcomes.get(event.id) ?? []), outcome].sort());
      }
    }),
  );
  return outcomes;
}

test("`receiveSync()` answers processed then duplicate for the same event twice, and books it once", async () => {
  const body = invoiceEvent("evt_twice", "invoice.paid", "in_twice");
  expect(await receive(body)).toBe("processed");
  expect(await receive(body)).toBe("duplicate");
  expect(await inboxRows("evt_twice")).toEqual([{ endpoint: "billing", outcome: "processed", processed: true }]);
  expect(await invoiceState("in_twice")).toEqual({
    status: "paid",
    amountPaid: 2000,
    ledger: [{ amount: 2000, currency: "usd", eventId: "evt_twice" }],
    bookings: 1,
  });
  const [booking] = await db`select payload from outbox where aggregate_id = 'in_twice'`;
  expect(booking?.payload).toEqual({ invoice_id: "in_twice", amount: 2000, currency: "usd", event_id: "evt_twice" });
});

test(
  "`receiveSync()` books one payment for 8 concurrent deliveries",
  async () => {
    const body = invoiceEvent("evt_eight", "invoice.paid", "in_eight");
    const group = await connectedActors(8);
    const outcomes = await Promise.all(group.map((actor) => receive(body, { actor })));
    expect(outcomes.filter((o) => o === "processed")).toHaveLength(1);
    expect(outcomes.filter((o) => o === "duplicate")).toHaveLength(7);
    expect(await inboxRows("evt_eight")).toHaveLength(1);
    expect(await invoiceState("in_eight")).toEqual({
      status: "paid",
      amountPaid: 2000,
      ledger: [{ amount: 2000, currency: "usd", eventId: "evt_eight" }],
      bookings: 1,
    });
  },
  CONCURRENT_TEST_TIMEOUT_MS,
);

test(
  "`receiveSync()` holds 7 concurrent duplicates on the uncommitted inbox row, then answers them duplicate",
  async () => {
    const body = invoiceEvent("evt_eight_held", "invoice.paid", "in_eight_held");
    const group = await connectedActors(9);
    const observer = group.pop() as Db;
    const pids = await Promise.all(group.map(backendPid));
    // The first delivery keeps its transaction open until the observer has seen the 7 others blocked.
    let sevenWaiting = false;
    let calls = 0;
    const handlers: HandlerTable = {
      "invoice.paid": async (tx, object, context) => {
        calls++;
        await realPaidHandler()(tx, object, context);
        for (let i = 0; i < 200 && !sevenWaiting; i++) await tx`select pg_sleep(0.05)`;
      },
    };
    let settled = false;
    const all = Promise.all(group.map((actor) => receive(body, { actor, target: { ...BILLING, handlers } }))).finally(
      () => (settled = true),
    );
    await waitUntil("7 deliveries waiting on a lock, or all settled", async () => {
      const [row] = await observer`select count(distinct pid)::int as n from pg_locks where pid = any(${pids}) and not granted`;
      sevenWaiting = row?.n === 7;
      return sevenWaiting || settled;
    });
    const outcomes = await all;
    expect(sevenWaiting).toBe(true);
    expect(calls).toBe(1);
    expect(outcomes.toSorted()).toEqual([
      "duplicate",
      "duplicate",
      "duplicate",
      "duplicate",
      "duplicate",
      "duplicate",
      "duplicate",
      "processed",
    ]);
    expect(await invoiceState("in_eight_held")).toEqual({
      status: "paid",
      amountPaid: 2000,
      ledger: [{ amount: 2000, currency: "usd", eventId: "evt_eight_held" }],
      bookings: 1,
    });
  },
  CONCURRENT_TEST_TIMEOUT_MS,
);

test(
  "`receiveSync()` lets a waiting delivery process the event after the first fails while holding the row",
  async () => {
    const body = invoiceEvent("evt_takeover", "invoice.paid", "in_takeover");
    let calls = 0;
    const handlers: HandlerTable = {
      ...billingHandlers,
      "invoice.paid": async (tx, object, context) => {
        await realPaidHandler()(tx, object, context);
        await tx`select pg_sleep(0.5)`;
        if (++calls === 1) throw new Error("Simulated failure after holding the inbox row");
      },
    };
    const [first, second, observer] = (await connectedActors(3)) as [Db, Db, Db];
    const [firstPid, secondPid] = [await backendPid(first), await backendPid(second)];
    const target = { ...BILLING, handlers };
    const order: string[] = [];

    const firstDone = receive(body, { actor: first, target }).then(
      (outcome) => order.push(`first ${outcome}`),
      (err: unknown) => order.push(`first rejected: ${(err as Error).message}`),
    );
    await waitUntil(
      "the first delivery in pg_sleep",
      async () =>
        (await observer`select 1 from pg_stat_activity where pid = ${firstPid} and state = 'active' and query like 'select pg_sleep%'`)
          .length === 1,
    );
    order.push("first holds the row");

    let secondSettled = false;
    const secondDone = receive(body, { actor: second, target })
      .then(
        (outcome) => order.push(`second ${outcome}`),
        (err: unknown) => order.push(`second rejected: ${(err as Error).message}`),
      )
      .finally(() => (secondSettled = true));
    let secondWaited = false;
    await waitUntil("the second delivery waiting on a lock, or settled", async () => {
      secondWaited = (await observer`select 1 from pg_locks where pid = ${secondPid} and not granted`).length > 0;
      return secondWaited || secondSettled;
    });
    if (secondWaited) order.push("second waits on the row");

    await Promise.all([firstDone, secondDone]);
    expect(order).toEqual([
      "first holds the row",
      "second waits on the row",
      "first rejected: Simulated failure after holding the inbox row",
      "second processed",
    ]);
    expect(calls).toBe(2);
    expect(await inboxRows("evt_takeover")).toEqual([{ endpoint: "billing", outcome: "processed", processed: true }]);
    expect(await invoiceState("in_takeover")).toEqual({
      status: "paid",
      amountPaid: 2000,
      ledger: [{ amount: 2000, currency: "usd", eventId: "evt_takeover" }],
      bookings: 1,
    });
  },
  CONCURRENT_TEST_TIMEOUT_MS,
);

test("`receiveSync()` keeps no inbox row after a failed delivery and processes the retry", async () => {
  const body = invoiceEvent("evt_retry", "invoice.paid", "in_retry");
  let calls = 0;
  const handlers: HandlerTable = {
    "invoice.paid": async (tx, object, context) => {
      await realPaidHandler()(tx, object, context);
      if (++calls === 1) throw new Error("Simulated downstream failure");
    },
  };
  const target = { ...BILLING, handlers };
  await expect(receive(body, { target })).rejects.toThrow("Simulated downstream failure");
  expect(await inboxRows("evt_retry")).toEqual([]);
  expect(await invoiceState("in_retry")).toEqual({ status: null, amountPaid: null, ledger: [], bookings: 0 });
  expect(await receive(body, { target })).toBe("processed");
  expect(await inboxRows("evt_retry")).toEqual([{ endpoint: "billing", outcome: "processed", processed: true }]);
  expect(await invoiceState("in_retry")).toEqual({
    status: "paid",
    amountPaid: 2000,
    ledger: [{ amount: 2000, currency: "usd", eventId: "evt_retry" }],
    bookings: 1,
  });
});

test("`receiveSync()` ends paid when invoice.paid arrives before invoice.created and invoice.finalized", async () => {
  expect(await receive(invoiceEvent("evt_early_paid", "invoice.paid", "in_early"))).toBe("processed");
  expect(await invoiceState("in_early")).toMatchObject({ status: "paid", amountPaid: 2000 });
  expect(await receive(invoiceEvent("evt_late_created", "invoice.created", "in_early"))).toBe("processed");
  expect(await receive(invoiceEvent("evt_late_finalized", "invoice.finalized", "in_early"))).toBe("processed");
  expect(await invoiceState("in_early")).toEqual({
    status: "paid",
    amountPaid: 2000,
    ledger: [{ amount: 2000, currency: "usd", eventId: "evt_early_paid" }],
    bookings: 1,
  });
});

test("`receiveSync()` keeps a paid invoice paid when invoice.voided arrives later", async () => {
  expect(await receive(invoiceEvent("evt_pv_created", "invoice.created", "in_paid_voided"))).toBe("processed");
  expect(await receive(invoiceEvent("evt_pv_paid", "invoice.paid", "in_paid_voided"))).toBe("processed");
  expect(await receive(invoiceEvent("evt_pv_voided", "invoice.voided", "in_paid_voided"))).toBe("processed");
  expect(await invoiceState("in_paid_voided")).toEqual({
    status: "paid",
    amountPaid: 2000,
    ledger: [{ amount: 2000, currency: "usd", eventId: "evt_pv_paid" }],
    bookings: 1,
  });
});

test("`receiveSync()` books one payment for invoice.paid and invoice.payment_succeeded of one invoice", async () => {
  expect(await receive(invoiceEvent("evt_two_paid", "invoice.paid", "in_two_ids"))).toBe("processed");
  expect(await receive(invoiceEvent("evt_two_succeeded", "invoice.payment_succeeded", "in_two_ids"))).toBe("processed");
  expect(await invoiceState("in_two_ids")).toEqual({
    status: "paid",
    amountPaid: 2000,
    ledger: [{ amount: 2000, currency: "usd", eventId: "evt_two_paid" }],
    bookings: 1,
  });
});

test(
  "`receiveSync()` books one payment for invoice.paid and invoice.payment_succeeded delivered concurrently",
  async () => {
    const [a, b] = (await connectedActors(2)) as [Db, Db];
    for (let i = 0; i < 5; i++) {
      const invoiceId = `in_two_ids_concurrent_${i}`;
      const outcomes = await Promise.all([
        receive(invoiceEvent(`evt_tc_paid_${i}`, "invoice.paid", invoiceId, 1000 + i), { actor: a }),
        receive(invoiceEvent(`evt_tc_succeeded_${i}`, "invoice.payment_succeeded", invoiceId, 1000 + i), { actor: b }),
      ]);
      expect(outcomes).toEqual(["processed", "processed"]);
      const state = await invoiceState(invoiceId);
      expect(state).toMatchObject({ status: "paid", amountPaid: 1000 + i, bookings: 1 });
      expect(state.ledger).toHaveLength(1);
      expect(state.ledger[0]?.amount).toBe(1000 + i);
      expect([`evt_tc_paid_${i}`, `evt_tc_succeeded_${i}`]).toContain(state.ledger[0]?.eventId as string);
    }
  },
  CONCURRENT_TEST_TIMEOUT_MS,
);

test("`receiveSync()` books nothing and queues no notification for invoice.paid on a voided invoice, and refuses it for review", async () => {
  expect(await receive(invoiceEvent("evt_vp_voided", "invoice.voided", "in_voided_paid"))).toBe("processed");
  // Refused with a data exception (22000): the receiver parks it as needs-review instead of acknowledging it as processed.
  const refused = await receive(invoiceEvent("evt_vp_paid", "invoice.paid", "in_voided_paid")).then(
    () => null,
    (err: unknown) => err as { code?: string; message?: string },
  );
  expect(refused?.code).toBe("22000");
  expect(refused?.message).toContain("void invoice");
  expect(await count(db, "webhook_inbox", "event_id = 'evt_vp_paid'")).toBe(0);
  expect(await invoiceState("in_voided_paid")).toEqual({ status: "void", amountPaid: 0, ledger: [], bookings: 0 });
  expect(await count(db, "outbox", "aggregate_id = 'in_voided_paid'")).toBe(0);
});

test("`receiveSync()` moves created → finalized → marked_uncollectible → paid and books once", async () => {
  const steps = [
    ["evt_mu_created", "invoice.created", "draft"],
    ["evt_mu_finalized", "invoice.finalized", "open"],
    ["evt_mu_uncollectible", "invoice.marked_uncollectible", "uncollectible"],
    ["evt_mu_paid", "invoice.paid", "paid"],
  ] as const;
  for (const [eventId, type, status] of steps) {
    expect(await receive(invoiceEvent(eventId, type, "in_uncollectible", 3500))).toBe("processed");
    expect((await invoiceState("in_uncollectible")).status).toBe(status);
  }
  expect(await invoiceState("in_uncollectible")).toEqual({
    status: "paid",
    amountPaid: 3500,
    ledger: [{ amount: 3500, currency: "usd", eventId: "evt_mu_paid" }],
    bookings: 1,
  });
});

test("`receiveSync()` processes one event at two endpoints and still books it once", async () => {
  const body = invoiceEvent("evt_two_endpoints", "invoice.paid", "in_two_endpoints");
  const analytics: ReceiveTarget = { provider: "stripe", endpoint: "analytics", handlers: billingHandlers };
  expect(await receive(body)).toBe("processed");
  expect(await receive(body, { target: analytics })).toBe("processed");
  expect(await receive(body)).toBe("duplicate");
  expect(await receive(body, { target: analytics })).toBe("duplicate");
  expect(await inboxRows("evt_two_endpoints")).toEqual([
    { endpoint: "analytics", outcome: "processed", processed: true },
    { endpoint: "billing", outcome: "processed", processed: true },
  ]);
  expect(await invoiceState("in_two_endpoints")).toEqual({
    status: "paid",
    amountPaid: 2000,
    ledger: [{ amount: 2000, currency: "usd", eventId: "evt_two_endpoints" }],
    bookings: 1,
  });
});

test("`receiveSync()` throws a PermanentError naming `customer` for an invoice without one, and records nothing", async () => {
  const object = invoice({ id: "in_no_customer", status: "paid", amount_paid: 2000 });
  delete object.customer;
  const body = eventBody("evt_no_customer", "invoice.paid", object);
  const err = await receive(body).then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(PermanentError);
  expect((err as Error).message).toBe("Cannot apply invoice event: missing or invalid field(s) customer");
  expect(await inboxRows("evt_no_customer")).toEqual([]);
  expect(await invoiceState("in_no_customer")).toEqual({ status: null, amountPaid: null, ledger: [], bookings: 0 });
});

test("`receiveSync()` records an unknown event type as ignored, settled, and answers its redelivery duplicate", async () => {
  const body = eventBody("evt_unknown_type", "customer.created", { id: "cus_unknown_type", object: "customer" });
  expect(await receive(body)).toBe("ignored");
  expect(await receive(body)).toBe("duplicate");
  expect(await inboxRows("evt_unknown_type")).toEqual([{ endpoint: "billing", outcome: "ignored", processed: true }]);
  const [row] = await db`select event_type from webhook_inbox where event_id = 'evt_unknown_type'`;
  expect(row?.event_type).toBe("customer.created");
});

test("`receiveSync()` stores the payload as a jsonb object equal to the parsed body", async () => {
  const object = invoice({
    id: "in_payload",
    metadata: { note: '請求書 ✓ "quoted" \\ back', nested: { list: [1, 2.5, null, true, "x"] } },
  });
  const body = invoiceEvent("evt_payload", "invoice.created", "in_payload", 2000, object);
  expect(await receive(body)).toBe("processed");
  // The state row and its payload row, found by its key and received_at (sql/0027).
  const [row, ...more] = await db`
    select jsonb_typeof(p.payload) as kind, p.payload, p.payload = ${body}::text::jsonb as same, p.raw_body, w.event_type
      from webhook_inbox w
      join webhook_inbox_payloads p using (provider, endpoint, event_id, received_at)
     where w.event_id = 'evt_payload'
  `;
  expect(more).toEqual([]);
  expect(row?.raw_body).toBeNull();
  expect(row?.kind).toBe("object");
  expect(row?.same).toBe(true);
  expect(row?.payload).toEqual(JSON.parse(body));
  expect(row?.event_type).toBe("invoice.created");
});

test(
  "`receiveSync()` reaches the fixtures' documented end state when they arrive shuffled, twice and concurrently",
  async () => {
    const bodies = lifecycle().flatMap((f) => [f.body, f.body]);
    shuffleInPlace(bodies, mulberry32(7));
    const outcomes = await deliverConcurrently(bodies, await connectedActors(6));
    expect(outcomes.size).toBe(12);
    const plan = verified(fixture("12_plan.created_evt_1Pgc76B7WZ01zgkWwyRHS12y.json")).id;
    for (const [eventId, pair] of outcomes) expect(pair).toEqual(eventId === plan ? ["duplicate", "ignored"] : ["duplicate", "processed"]);
    expect(await invoiceState("in_1SkA1pLgUG5tbmjcQ7nB2vXa")).toMatchObject({ status: "paid", amountPaid: 2000, bookings: 1 });
    expect((await invoiceState("in_1SkA1pLgUG5tbmjcQ7nB2vXa")).ledger.map((l) => l.amount)).toEqual([2000]);
    expect(await invoiceState("in_1SkA2qLgUG5tbmjcR8oC3wYb")).toEqual({ status: "void", amountPaid: 0, ledger: [], bookings: 0 });
    expect(await invoiceState("in_1SkA3rLgUG5tbmjcS9pD4xZc")).toMatchObject({ status: "paid", amountPaid: 129900, bookings: 1 });
    expect((await invoiceState("in_1SkA3rLgUG5tbmjcS9pD4xZc")).ledger.map((l) => l.amount)).toEqual([129900]);
  },
  CONCURRENT_TEST_TIMEOUT_MS,
);

type Variant = "paid" | "voided" | "uncollectible-then-paid";

/** A generated invoice lifecycle: its event bodies, and the end state a correct receiver must reach. */
function generateLifecycle(seed: number, index: number, amount: number) {
  const variant: Variant = (["paid", "voided", "uncollectible-then-paid"] as const)[index % 3] as Variant;
  const invoiceId = `in_prop_${seed}_${index}`;
  const tail = {
    paid: ["invoice.paid", "invoice.payment_succeeded"],
    voided: ["invoice.voided"],
    "uncollectible-then-paid": ["invoice.marked_uncollectible", "invoice.paid"],
  }[variant];
  const types = ["invoice.created", "invoice.finalized", ...tail];
  const bodies = types.map((type) => invoiceEvent(`evt_prop_${seed}_${index}_${type.slice("invoice.".length)}`, type, invoiceId, amount));
  const paid = types.includes("invoice.paid") && !types.includes("invoice.voided");
  return {
    invoiceId,
    bodies,
    expected: { status: paid ? "paid" : "void", amountPaid: paid ? amount : 0, ledger: paid ? [amount] : [], bookings: paid ? 1 : 0 },
  };
}

test.each([1, 2, 3])(
  "`receiveSync()` reaches the modelled end state for 20 shuffled, doubled lifecycles on 6 connections (seed %i)",
  async (seed) => {
    const random = mulberry32(seed);
    const invoices = Array.from({ length: 20 }, (_, i) => generateLifecycle(seed, i, 100 + Math.floor(random() * 100_000)));
    const bodies = invoices.flatMap((inv) => inv.bodies.flatMap((b) => [b, b]));
    shuffleInPlace(bodies, random);

    const outcomes = await deliverConcurrently(bodies, await connectedActors(6));

    expect(outcomes.size).toBe(bodies.length / 2);
    for (const pair of outcomes.values()) expect(pair).toEqual(["duplicate", "processed"]);
    const actual = await Promise.all(
      invoices.map(async (inv) => {
        const state = await invoiceState(inv.invoiceId);
        return { ...state, ledger: state.ledger.map((l) => l.amount) };
      }),
    );
    expect(actual).toEqual(invoices.map((inv) => inv.expected));
    const prefix = `in_prop_${seed}_%`;
    expect(await count(db, "outbox", `aggregate_id like '${prefix}'`)).toBe(
      await count(db, "ledger_entries", `invoice_id like '${prefix}'`),
    );
    expect(await count(db, "ledger_entries", `invoice_id like '${prefix}'`)).toBe(
      invoices.filter((inv) => inv.expected.status === "paid").length,
    );
  },
  CONCURRENT_TEST_TIMEOUT_MS,
);

test("`receiveSync()` books nothing for a partial payment and books the total once the invoice is paid", async () => {
  const invoiceId = "in_partial_1";
  const partial = invoiceEvent("evt_partial_1", "invoice.payment_succeeded", invoiceId, 2000, {
    status: "open",
    amount_paid: 500,
    amount_remaining: 1500,
  });
  expect(await receive(invoiceEvent("evt_partial_0", "invoice.finalized", invoiceId))).toBe("processed");
  expect(await receive(partial)).toBe("processed");
  const [afterPartial] = await db`select status, amount_paid::int as paid from invoices where id = ${invoiceId}`;
  expect(afterPartial).toEqual({ status: "open", paid: 0 });
  expect(await count(db, "ledger_entries", `invoice_id = '${invoiceId}'`)).toBe(0);

  expect(await receive(invoiceEvent("evt_partial_2", "invoice.paid", invoiceId, 2000, { amount_paid: 2000 }))).toBe("processed");
  const ledger = await db`select amount::int as amount from ledger_entries where invoice_id = ${invoiceId}`;
  expect([...ledger]).toEqual([{ amount: 2000 }]);
  expect(await count(db, "outbox", `aggregate_id = '${invoiceId}'`)).toBe(1);
});

test("`receiveSync()` refuses a payment in another currency than the invoice's, and books nothing", async () => {
  expect(await receive(invoiceEvent("evt_cur_created", "invoice.created", "in_currency_1"))).toBe("processed");
  const eur = invoiceEvent("evt_cur_paid", "invoice.paid", "in_currency_1", 2000, { currency: "eur" });
  const refused = await receive(eur).then(
    () => null,
    (err: unknown) => err as { code?: string; message?: string },
  );
  expect(refused?.code).toBe("22000");
  expect(refused?.message).toContain("currency");
  expect(await invoiceState("in_currency_1")).toMatchObject({ status: "draft", ledger: [], bookings: 0 });
});

test.each([
  ["invoice.voided racing invoice.paid", "invoice.voided", {}],
  ["invoice.created in eur racing invoice.paid in usd", "invoice.created", { currency: "eur" }],
] as const)(
  "`receiveSync()` never acknowledges a refused payment as processed when the invoice row appears concurrently: %s",
  async (_label, firstType, overrides) => {
    const [left, right] = await connectedActors(2);
    if (!left || !right) throw new Error("expected two connections");
    for (let i = 0; i < 20; i++) {
      const invoiceId = `in_race_${firstType.replace(".", "_")}_${i}`;
      const first = invoiceEvent(`evt_race_a_${firstType}_${i}`, firstType, invoiceId, 2000, overrides);
      const paid = invoiceEvent(`evt_race_p_${firstType}_${i}`, "invoice.paid", invoiceId);
      const [, payment] = await Promise.all([
        receive(first, { actor: left }),
        receive(paid, { actor: right }).then(
          (outcome) => ({ outcome, code: undefined as string | undefined }),
          (err: { code?: string }) => ({ outcome: undefined, code: err.code }),
        ),
      ]);
      const state = await invoiceState(invoiceId);
      if (payment.outcome === "processed") {
        // The payment won the race: booked once, whatever the other event did afterwards.
        expect(state).toMatchObject({ status: "paid", bookings: 1 });
      } else {
        // The other event won: the payment is refused (parked by the receiver), never processed with nothing booked.
        expect(payment.code).toBe("22000");
        expect(state.bookings).toBe(0);
      }
    }
  },
  CONCURRENT_TEST_TIMEOUT_MS,
);

test("`receiveSync()` refuses a second payment event whose amount_paid differs from the amount booked, and keeps the first booking", async () => {
  expect(await receive(invoiceEvent("evt_amt_paid_1", "invoice.paid", "in_amount_1", 2000))).toBe("processed");
  const other = invoiceEvent("evt_amt_paid_2", "invoice.payment_succeeded", "in_amount_1", 2500, { amount_paid: 2500 });
  const refused = await receive(other).then(
    () => null,
    (err: unknown) => err as { code?: string; message?: string },
  );
  expect(refused?.code).toBe("22000");
  expect(refused?.message).toContain("amount_paid differs from the amount already booked");
  // The same amount again is the same payment: a no-op, not an anomaly.
  expect(await receive(invoiceEvent("evt_amt_paid_3", "invoice.payment_succeeded", "in_amount_1", 2000))).toBe("processed");
  expect(await invoiceState("in_amount_1")).toMatchObject({
    status: "paid",
    amountPaid: 2000,
    ledger: [{ amount: 2000, eventId: "evt_amt_paid_1" }],
    bookings: 1,
  });
});

test.each([
  ["amount_paid 0 while amount_due is 2000", 2000, 0, "amount_paid 0"],
  ["amount_paid 2500 above amount_due 2000", 2000, 2500, "amount_paid above amount_due"],
  ["amount_paid 1 below amount_due 2000", 2000, 1, "amount_paid below amount_due"],
])("`receiveSync()` refuses a paid invoice with %s, and books nothing", async (_label, amountDue, amountPaid, reason) => {
  const invoiceId = `in_bad_amount_${amountPaid}`;
  expect(await receive(invoiceEvent(`evt_bad_amount_created_${amountPaid}`, "invoice.created", invoiceId, amountDue))).toBe("processed");
  const refused = await receive(
    invoiceEvent(`evt_bad_amount_${amountPaid}`, "invoice.paid", invoiceId, amountDue, { amount_paid: amountPaid }),
  ).then(
    () => null,
    (err: unknown) => err as Error,
  );
  expect(refused).toBeInstanceOf(PermanentError);
  expect(refused?.message).toContain(reason);
  expect(await invoiceState(invoiceId)).toMatchObject({ status: "draft", ledger: [], bookings: 0 });
  expect(await count(db, "webhook_inbox", `event_id = 'evt_bad_amount_${amountPaid}'`)).toBe(0);
});

test("`receiveSync()` books an overpayment Stripe reports as amount_overpaid in full", async () => {
  expect(
    await receive(invoiceEvent("evt_overpaid", "invoice.paid", "in_overpaid_1", 2000, { amount_paid: 2500, amount_overpaid: 500 })),
  ).toBe("processed");
  expect(await invoiceState("in_overpaid_1")).toMatchObject({
    status: "paid",
    amountPaid: 2500,
    ledger: [{ amount: 2500, eventId: "evt_overpaid" }],
    bookings: 1,
  });
});

test.each([
  ["nothing through Stripe (amount_paid 0)", 0, []],
  ["a part through Stripe (amount_paid 500 of 2000)", 500, [{ amount: 500, eventId: "evt_oob_paid_500" }]],
])(
  "`receiveSync()` moves an invoice marked paid out of band to paid and books only what moved through Stripe: %s",
  async (_label, amountPaid, ledger) => {
    const invoiceId = `in_oob_${amountPaid}`;
    expect(await receive(invoiceEvent(`evt_oob_open_${amountPaid}`, "invoice.finalized", invoiceId, 2000, { status: "open" }))).toBe(
      "processed",
    );
    const paid = { amount_paid: amountPaid, amount_remaining: 0, paid_out_of_band: true };
    expect(await receive(invoiceEvent(`evt_oob_paid_${amountPaid}`, "invoice.paid", invoiceId, 2000, paid))).toBe("processed");
    // Its sibling event for the same fact changes nothing more.
    expect(await receive(invoiceEvent(`evt_oob_succeeded_${amountPaid}`, "invoice.payment_succeeded", invoiceId, 2000, paid))).toBe(
      "processed",
    );
    expect(await invoiceState(invoiceId)).toMatchObject({ status: "paid", amountPaid, ledger, bookings: ledger.length });
  },
);

test("`receiveSync()` moves a fully discounted invoice (amount_due 0, amount_paid 0) to paid and books no zero-amount payment", async () => {
  expect(await receive(invoiceEvent("evt_free_paid", "invoice.paid", "in_free_1", 0))).toBe("processed");
  expect(await receive(invoiceEvent("evt_free_succeeded", "invoice.payment_succeeded", "in_free_1", 0))).toBe("processed");
  expect(await invoiceState("in_free_1")).toMatchObject({ status: "paid", amountPaid: 0, ledger: [], bookings: 0 });
});

test(
  "`receiveSync()` books one amount and refuses every other when payments of different amounts for one invoice arrive concurrently",
  async () => {
    const group = await connectedActors(6);
    for (let i = 0; i < 10; i++) {
      const invoiceId = `in_amount_race_${i}`;
      const amounts = group.map((_, n) => (n % 2 === 0 ? 2000 : 2500));
      const results = await Promise.all(
        group.map((actor, n) =>
          receive(
            invoiceEvent(`evt_amount_race_${i}_${n}`, n % 3 === 0 ? "invoice.payment_succeeded" : "invoice.paid", invoiceId, amounts[n], {
              amount_paid: amounts[n],
            }),
            { actor },
          ).then(
            (outcome) => ({ outcome, code: undefined as string | undefined }),
            (err: { code?: string }) => ({ outcome: undefined, code: err.code }),
          ),
        ),
      );
      const state = await invoiceState(invoiceId);
      expect(state.ledger).toHaveLength(1);
      expect(state.bookings).toBe(1);
      const booked = state.ledger[0]?.amount;
      expect(state.amountPaid).toBe(booked ?? -1);
      results.forEach((result, n) => {
        expect({ n, ...result }).toEqual(
          amounts[n] === booked ? { n, outcome: "processed", code: undefined } : { n, outcome: undefined, code: "22000" },
        );
      });
    }
  },
  CONCURRENT_TEST_TIMEOUT_MS,
);
