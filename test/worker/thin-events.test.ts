// Thin events end to end: signed notifications through the receiver into the inbox, the worker reading
// what they point to from the fake Stripe API (stripe-node over loopback), the Stripe handlers applying it.
import { afterAll, afterEach, beforeEach, describe, expect, test } from "bun:test";
import { createApp, type Endpoint } from "../../src/receiver/app.ts";
import { handlerTables, stripeEndpoints, thinHandlers, workerHandlerTables } from "../../src/receiver/endpoints.ts";
import { connect, type Db } from "../../src/db/db.ts";
import { runWorker, type WorkerOptions } from "../../src/worker/worker.ts";
import { stripeFetcher } from "../../src/worker/stripe-fetch.ts";
import { healthWindow, thinHandlerTable } from "../../src/handlers/stripe-thin.ts";
import { finishBackfillRequest, takeBackfillRequest } from "../../src/handlers/backfill-requests.ts";
import { stripeApiClient } from "../../src/stripe-api/client.ts";
import { startFakeStripe, type RunningFakeStripe } from "../../src/dev/fake-stripe/serve.ts";
import { FakeStripeStore } from "../../src/dev/fake-stripe/store.ts";
import { V2_EVENTS } from "../../src/dev/fake-stripe/app.ts";
import { mulberry32, shuffleInPlace } from "../../src/dev/random.ts";
import { changeOnceTable } from "../../src/handlers/change-once.ts";
import type { HandlerTable } from "../../src/handlers/handler-table.ts";
import { stripeProvider } from "../../src/providers/stripe.ts";
import { stripeThinProvider } from "../../src/providers/stripe-thin.ts";
import {
  count,
  eventBody,
  freshDatabase,
  invoice,
  lifecycle,
  OTHER_SECRET,
  readFixtures,
  SECRET,
  signedRequest,
} from "../support/helpers.ts";
import { deliver as deliverFiles } from "../../src/dev/deliver.ts";
import { readThinNotification } from "../../src/providers/stripe-thin.ts";
import Stripe from "stripe";
import { healthEvent, healthNotification, thinFromClassic, type HealthEventData, type ThinBody } from "../support/thin.ts";
import { waitUntil } from "../support/wait-until.ts";

const fresh = await freshDatabase();
const db = fresh.db;
afterAll(() => fresh.drop());

const KEY = "sk_test_thinthinthin123";
const BASE = "http://receiver.test/webhooks/stripe";
let fake: RunningFakeStripe;

beforeEach(async () => {
  await db`truncate webhook_inbox, webhook_inbox_payloads, outbox, ledger_entries, invoices, stripe_change_claims, event_backfill_requests`;
  fake = startFakeStripe({ store: new FakeStripeStore(KEY) });
});
afterEach(() => fake.stop());

/** Classic `billing` and thin `thin` endpoints, as STRIPE_ENDPOINTS with STRIPE_ENDPOINT_KIND_THIN=thin configures them. */
function endpoints(): Endpoint[] {
  return stripeEndpoints([
    { name: "billing", secrets: [SECRET] },
    { name: "thin", secrets: [OTHER_SECRET], kind: "thin" },
  ]);
}

/** Posts `body` to `/webhooks/stripe/<endpoint>` signed with that endpoint's secret; returns the answer's outcome. */
async function deliver(app: ReturnType<typeof createApp>, endpoint: "billing" | "thin" | "refetch", body: string): Promise<string> {
  const secret = endpoint === "thin" ? OTHER_SECRET : SECRET;
  const res = await app.fetch(await signedRequest(`${BASE}/${endpoint}`, body, { secret }));
  const answer = (await res.json()) as { outcome?: string; error?: string };
  expect({ status: res.status, error: answer.error }).toEqual({ status: 200, error: undefined });
  return answer.outcome ?? "";
}

/** Runs one worker (its own pool) against the fake until no row is unprocessed, then stops it; returns its log lines. */
async function drain(overrides: Partial<WorkerOptions> & { requestsPerSecond?: number } = {}): Promise<Record<string, unknown>[]> {
  const lines: Record<string, unknown>[] = [];
  const pool = connect(fresh.url, { max: 3 });
  const controller = new AbortController();
  const fetcher = stripeFetcher({
    stripe: stripeApiClient({ apiKey: KEY, apiBase: new URL(fake.url) }),
    refetchEndpoints: new Set(["refetch"]),
    requestsPerSecond: overrides.requestsPerSecond ?? 1_000,
    retry: { attempts: 2, baseMs: 1, maxMs: 5 },
  });
  const worker = runWorker({
    db: pool,
    tables: workerHandlerTables(true),
    signal: controller.signal,
    pollMs: 20,
    backoff: { baseMs: 5, capMs: 20 },
    log: (line) => lines.push(line),
    fetcher,
    ...overrides,
  });
  try {
    await waitUntil(
      "an empty backlog",
      async () => (await count(db, "webhook_inbox", "processed_at is null and needs_review_at is null")) === 0,
      {
        timeoutMs: 30_000,
      },
    );
  } finally {
    controller.abort();
    await worker;
    await pool.end({ timeout: 5 });
  }
  return lines;
}

/** The invoice lifecycle's classic events, and Stripe's current state of each of their objects (the last event's copy). */
function lifecycleWithStore(): { name: string; body: string }[] {
  const events = lifecycle();
  for (const e of events) {
    const object = (JSON.parse(e.body) as { data: { object: { id: string; object: string } } }).data.object;
    const resource = object.object === "invoice" ? "invoices" : `${object.object}s`;
    fake.store.put(resource, { ...object, created: 1_764_461_000 } as never);
  }
  return events;
}

const END_STATE = [
  { id: "in_1SkA1pLgUG5tbmjcQ7nB2vXa", status: "paid", amount_paid: 2000 },
  { id: "in_1SkA2qLgUG5tbmjcR8oC3wYb", status: "void", amount_paid: 0 },
  { id: "in_1SkA3rLgUG5tbmjcS9pD4xZc", status: "paid", amount_paid: 129900 },
];
const invoices = async () => [...(await db`select id, status, amount_paid::int as amount_paid from invoices order by id`)];

describe("thin endpoint", () => {
  test("`createApp()` records a thin notification unprocessed and answers queued; a redelivery is a duplicate; a classic event there is refused", async () => {
    const app = createApp({ db, endpoints: endpoints() });
    const [classic] = lifecycleWithStore();
    const thin = JSON.stringify(thinFromClassic(classic!.body, "evt_test_thin_rec_1"));
    expect(await deliver(app, "thin", thin)).toBe("queued");
    expect(await deliver(app, "thin", thin)).toBe("duplicate");
    // The state row and its payload row (sql/0027), one of each.
    const [row, ...more] = await db`
      select w.provider, w.endpoint, w.event_type, w.processed_at, p.payload->'related_object'->>'url' as url
        from webhook_inbox w
        join webhook_inbox_payloads p using (provider, endpoint, event_id, received_at)
    `;
    expect(more).toEqual([]);
    expect(await count(db, "webhook_inbox_payloads")).toBe(1);
    expect(row).toEqual({
      provider: "stripe-thin",
      endpoint: "thin",
      event_type: "v1.invoice.created",
      processed_at: null,
      url: "/v1/invoices/in_1SkA1pLgUG5tbmjcQ7nB2vXa",
    });
    const refused = await app.fetch(await signedRequest(`${BASE}/thin`, classic!.body, { secret: OTHER_SECRET }));
    expect([refused.status, ((await refused.json()) as { error: string }).error]).toEqual([400, "invalid_event"]);
    expect(await count(db, "webhook_inbox")).toBe(1);
    expect(await count(db, "webhook_inbox_payloads")).toBe(1);
  });

  test.each([7, 99])("`runWorker()` ends a thin lifecycle shuffled (seed %d) with 3 copies each in the classic end state", async (seed) => {
    const app = createApp({ db, endpoints: endpoints() });
    const bodies = lifecycleWithStore().map((e, i) => JSON.stringify(thinFromClassic(e.body, `evt_test_thin_${seed}_${i}`)));
    const queue = bodies.flatMap((b) => [b, b, b]);
    shuffleInPlace(queue, mulberry32(seed));
    const outcomes: Record<string, number> = {};
    for (const b of queue) {
      const o = await deliver(app, "thin", b);
      outcomes[o] = (outcomes[o] ?? 0) + 1;
    }
    // plan.created has no handler: recorded ignored at once, like on a classic endpoint.
    expect(outcomes).toEqual({ queued: 11, ignored: 1, duplicate: 24 });
    await drain();
    expect(await invoices()).toEqual(END_STATE);
    expect(await count(db, "ledger_entries", "kind = 'payment'")).toBe(2);
    expect(await count(db, "outbox")).toBe(2);
    expect(await count(db, "webhook_inbox", "outcome = 'processed'")).toBe(11);
  });

  test("`runWorker()` settles a thin event whose object Stripe no longer has as object_missing after one attempt", async () => {
    const app = createApp({ db, endpoints: endpoints() });
    const body = eventBody("evt_gone_classic", "invoice.paid", invoice({ id: "in_gone", status: "paid", amount_paid: 2000 }));
    expect(await deliver(app, "thin", JSON.stringify(thinFromClassic(body, "evt_test_thin_gone")))).toBe("queued");
    await drain();
    const [row] = await db`select outcome, attempts, last_error from webhook_inbox`;
    expect(row?.outcome).toBe("object_missing");
    expect(row?.attempts).toBe(1);
    expect(String(row?.last_error)).toContain("in_gone");
    expect(fake.store.requests.filter((r) => r.path === "/v1/invoices/in_gone").length).toBe(1);
    expect(await count(db, "invoices")).toBe(0);
  });

  test("`runWorker()` through a 429 storm from the API applies every thin event, using no attempt on the storm", async () => {
    const app = createApp({ db, endpoints: endpoints() });
    const bodies = lifecycleWithStore().map((e, i) => JSON.stringify(thinFromClassic(e.body, `evt_test_thin_storm_${i}`)));
    for (const b of bodies) await deliver(app, "thin", b);
    fake.store.failNext(25, 429);
    fake.store.rateLimitFraction = 0.5;
    const lines = await drain();
    expect(await invoices()).toEqual(END_STATE);
    expect(await count(db, "ledger_entries", "kind = 'payment'")).toBe(2);
    expect(fake.store.requests.filter((r) => r.status === 429).length).toBeGreaterThanOrEqual(25);
    expect(lines.some((l) => l.outcome === "deferred")).toBe(true);
    expect(await count(db, "webhook_inbox", "needs_review_at is not null")).toBe(0);
    expect(await count(db, "webhook_inbox", "outcome = 'processed' and attempts = 1")).toBe(11);
  });
});

describe("thin fixtures", () => {
  const fixtures = readFixtures("stripe/thin-lifecycle");

  test("the thin-lifecycle fixtures are what `thinFromClassic()` (typed by stripe-node's notification types) builds, and stripe-node parses each", () => {
    const classic = lifecycle();
    expect(fixtures).toHaveLength(classic.length);
    const parser = new Stripe("sk_test_unused");
    for (const [i, f] of fixtures.entries()) {
      const parsed = JSON.parse(f.body) as { id: string; type: string };
      expect(parsed).toEqual(JSON.parse(JSON.stringify(thinFromClassic(classic[i]!.body, parsed.id))));
      expect(readThinNotification(parsed).type).toBe(parsed.type);
      expect(parser.parseEventNotificationWithoutVerification(f.body).type).toBe(parsed.type as never);
    }
  });

  test("`deliver()` sends the thin fixtures signed like Stripe's, shuffled with copies, and the worker ends them in the classic end state", async () => {
    lifecycleWithStore();
    const app = createApp({ db, endpoints: endpoints() });
    const summary = await deliverFiles(fixtures, {
      url: `${BASE}/thin`,
      secret: OTHER_SECRET,
      copies: 2,
      shuffle: true,
      seed: 5,
      concurrency: 4,
      fetch: (request) => app.fetch(request),
    });
    expect(summary.outcomes).toEqual({ queued: 11, ignored: 1, duplicate: 12 });
    await drain();
    expect(await invoices()).toEqual(END_STATE);
  });
});

describe("health-recovery fixtures", () => {
  test("`deliver()` sends the health notification twice and the worker, reading the fixtures' fake API, applies the invoice no event announced once", async () => {
    // What `bun run fake-stripe test/fixtures/stripe/health-recovery/api` serves: the v2 event and the paid invoice, no events.
    for (const f of readFixtures("stripe/health-recovery/api")) {
      const o = JSON.parse(f.body) as { object: string };
      fake.store.put(o.object === "v2.core.event" ? V2_EVENTS : `${o.object}s`, o as never);
    }
    const app = createApp({ db, endpoints: endpoints() });
    const summary = await deliverFiles(readFixtures("stripe/health-recovery/notification"), {
      url: `${BASE}/thin`,
      secret: OTHER_SECRET,
      copies: 2,
      fetch: (request) => app.fetch(request),
    });
    expect(summary.outcomes).toEqual({ queued: 1, duplicate: 1 });
    const lines = await drain();
    expect(await db`select id, status, amount_paid::int as amount_paid from invoices`).toEqual([
      { id: "in_1SkB4pLgUG5tbmjcT0qE5yAd", status: "paid", amount_paid: 7500 },
    ] as never);
    expect(await count(db, "ledger_entries", "kind = 'payment' and amount = 7500")).toBe(1);
    expect(await count(db, "outbox")).toBe(1);
    expect(String(lines.find((l) => l.type === "v2.core.health.event_generation_failure.resolved")?.note)).toBe(
      "read invoice in_1SkB4pLgUG5tbmjcT0qE5yAd (invoice.paid) to apply its current state; backfilling events created " +
        "2026-11-30T09:45:00.000Z..2026-12-01T09:45:00.000Z (24 h before data.resolved_at: the event names no start)",
    );
  });
});

describe("migration: classic and thin events of one change", () => {
  test.each([
    ["classic first", ["billing", "thin"]],
    ["thin first", ["thin", "billing"]],
  ] as const)(
    "the lifecycle delivered to both endpoints (%s) books each payment once and claims each change once",
    async (_name, order) => {
      const app = createApp({ db, endpoints: endpoints() });
      const classic = lifecycleWithStore();
      const thin = classic.map((e, i) => JSON.stringify(thinFromClassic(e.body, `evt_test_thin_mig_${i}`)));
      for (const endpoint of order) {
        if (endpoint === "billing") for (const e of classic) await deliver(app, "billing", e.body);
        else for (const b of thin) await deliver(app, "thin", b);
        await drain();
      }
      expect(await invoices()).toEqual(END_STATE);
      expect(await count(db, "ledger_entries", "kind = 'payment'")).toBe(2);
      expect(await count(db, "stripe_change_claims")).toBe(11);
    },
  );

  /** A handler that is NOT idempotent on its own: every run adds a row. Only the change claim keeps it to one per change. */
  async function countingTable(): Promise<HandlerTable> {
    await db`create table if not exists applied_runs (event_id text not null)`;
    await db`truncate applied_runs`;
    return { "invoice.paid": async (tx, _object, ctx) => void (await tx`insert into applied_runs values (${ctx.eventId})`) };
  }

  test.each([1, 2, 3])(
    "`runWorker()` and `createApp()` apply a non-idempotent handler once per change with classic and thin racing (round %d)",
    async (round) => {
      const table = await countingTable();
      const migrating = changeOnceTable(table);
      const app = createApp({
        db,
        endpoints: [
          { name: "billing", provider: stripeProvider, route: "stripe", secrets: [SECRET], handlers: migrating, mode: "sync" },
          {
            name: "thin",
            provider: stripeThinProvider,
            route: "stripe",
            secrets: [OTHER_SECRET],
            handlers: { "v1.invoice.paid": migrating["invoice.paid"]! },
            mode: "async",
          },
        ],
      });
      const changes = Array.from({ length: 6 }, (_, i) => {
        const object = invoice({ id: `in_race_${round}_${i}`, status: "paid", amount_paid: 2000 });
        fake.store.put("invoices", { ...object, created: 1_764_461_000 } as never);
        const classic = eventBody(`evt_race_${round}_${i}`, "invoice.paid", object);
        return { classic, thin: JSON.stringify(thinFromClassic(classic, `evt_test_thin_race_${round}_${i}`)) };
      });
      for (const c of changes) await deliver(app, "thin", c.thin);
      // The worker applies thin rows while the classic copies arrive on their own connections.
      const deliveries = Promise.all(changes.map(async (c) => deliver(app, "billing", c.classic)));
      await drain({ tables: { stripe: migrating, "stripe-thin": thinHandlerTable(table) } });
      await deliveries;
      const runs = await db<{ n: number }[]>`select count(*)::int as n from applied_runs`;
      expect(runs[0]?.n).toBe(6);
      expect(await count(db, "stripe_change_claims")).toBe(6);
    },
  );

  test("a thin event whose classic event was processed before any change was claimed applies nothing", async () => {
    const app = createApp({ db, endpoints: stripeEndpoints([{ name: "billing", secrets: [SECRET] }]) });
    const [, , paid] = lifecycleWithStore();
    expect(await deliver(app, "billing", paid!.body)).toBe("processed");
    // Were the thin event applied again, it would move the invoice back to paid and book the payment again.
    await db`delete from ledger_entries`;
    await db`update invoices set status = 'open'`;
    const migrating = createApp({ db, endpoints: endpoints() });
    expect(await deliver(migrating, "thin", JSON.stringify(thinFromClassic(paid!.body, "evt_test_thin_late")))).toBe("queued");
    await drain();
    expect(await count(db, "ledger_entries")).toBe(0);
    expect(await count(db, "invoices", "status = 'open'")).toBe(1);
    expect(await count(db, "webhook_inbox", "provider = 'stripe-thin' and outcome = 'processed'")).toBe(1);
  });
});

describe("refetch mode", () => {
  test("`runWorker()` applies Stripe's current object, not the stale copies of reordered same-second events", async () => {
    const current = invoice({ id: "in_refetch_1", status: "paid", amount_due: 5000, amount_paid: 5000 });
    fake.store.put("invoices", { ...current, created: 1_764_461_000 } as never);
    const refetch = stripeEndpoints([{ name: "refetch", secrets: [SECRET], mode: "async" }]);
    const app = createApp({ db, endpoints: refetch });
    // All from the same second; copies stale (amounts of an earlier draft), delivered newest first.
    const stale = invoice({ id: "in_refetch_1", status: "draft", amount_due: 4000, amount_paid: 0 });
    const events = [
      eventBody("evt_refetch_paid", "invoice.paid", { ...stale, status: "paid", amount_paid: 4000 }),
      eventBody("evt_refetch_finalized", "invoice.finalized", { ...stale, status: "open" }),
      eventBody("evt_refetch_created", "invoice.created", stale),
    ];
    for (const e of events) expect(await deliver(app, "refetch", e)).toBe("queued");
    await drain({ tables: handlerTables });
    const [row] = await db`select status, amount_due::int as amount_due, amount_paid::int as amount_paid from invoices`;
    expect(row).toEqual({ status: "paid", amount_due: 5000, amount_paid: 5000 });
    expect(await db`select amount::int as amount from ledger_entries where kind = 'payment'`).toEqual([{ amount: 5000 }] as never);
    expect(await count(db, "webhook_inbox", "outcome = 'processed'")).toBe(3);
    expect(fake.store.requests.filter((r) => r.path === "/v1/invoices/in_refetch_1").length).toBe(3);
  });
});

describe("health notification", () => {
  const RESOLVED = "2026-12-01T09:45:00.000Z";
  const CREATED = "2026-12-01T10:00:00.000Z";
  const PAID = invoice({ id: "in_health_1", status: "paid", amount_due: 4200, amount_paid: 4200 });

  /** Puts into the fake the full health event `id` reporting that Stripe created no `eventType` event for `related` (of `context`). */
  function putHealthEvent(id: string, eventType: string, related: { id: string; type: string; url: string }, context?: string): void {
    const data: HealthEventData = {
      alert_id: `halert_${id}`,
      grouping_key: `_grouping_${id}`,
      impact: { event_type: eventType, related_object: related, ...(context ? { context } : {}) },
      resolved_at: RESOLVED,
      summary: "Stripe failed to generate events",
    };
    fake.store.put(V2_EVENTS, { ...healthEvent(id, CREATED, data), created: Date.parse(CREATED) / 1000 } as never);
  }
  /** The paid invoice in the fake (no event announces it: the fake's event list stays empty), and a health event naming it. */
  function paidWithoutEvent(id: string, context?: string): string {
    // A connected account's invoice is kept (and read) under that account.
    fake.store.put("invoices", { ...PAID, created: 1_764_461_000 } as never, context ?? "");
    putHealthEvent(id, "invoice.paid", { id: "in_health_1", type: "invoice", url: "/v1/invoices/in_health_1" }, context);
    return JSON.stringify(healthNotification(id, CREATED));
  }
  const booked = async () => [...(await db`select invoice_id, kind, amount::int as amount from ledger_entries`)];

  test("`runWorker()` applies the paid invoice a health event names (no event of it exists) once, and requests a backfill of the 24 h before resolved_at", async () => {
    const app = createApp({ db, endpoints: endpoints() });
    const id = "evt_test_health_1";
    const body = paidWithoutEvent(id);
    expect(await deliver(app, "thin", body)).toBe("queued");
    expect(await deliver(app, "thin", body)).toBe("duplicate");
    const lines = await drain();
    expect(fake.store.objects.get("events")).toBeUndefined();
    expect(await db`select id, status, amount_paid::int as amount_paid from invoices`).toEqual([
      { id: "in_health_1", status: "paid", amount_paid: 4200 },
    ] as never);
    expect(await booked()).toEqual([{ invoice_id: "in_health_1", kind: "payment", amount: 4200 }] as never);
    expect(await count(db, "outbox", "event_type = 'InvoicePaymentBooked'")).toBe(1);
    expect(await db`select change_id, event_id from stripe_change_claims`).toEqual([{ change_id: id, event_id: id }] as never);
    expect(fake.store.requests.map((r) => `${r.path} ${r.account || "platform"}`)).toEqual([
      `/v2/core/events/${id} platform`,
      "/v1/invoices/in_health_1 platform",
    ]);
    const rows = await db`select endpoint, requested_by, window_start, window_end from event_backfill_requests`;
    expect([...rows]).toEqual([
      { endpoint: "thin", requested_by: id, window_start: new Date("2026-11-30T09:45:00.000Z"), window_end: new Date(RESOLVED) },
    ]);
    const line = lines.find((l) => l.event_id === id);
    expect(line?.outcome).toBe("processed");
    expect(String(line?.note)).toBe(
      "read invoice in_health_1 (invoice.paid) to apply its current state; backfilling events created " +
        "2026-11-30T09:45:00.000Z..2026-12-01T09:45:00.000Z (24 h before data.resolved_at: the event names no start)",
    );

    // The seam the event backfill takes its work from: one runner at a time, taken again if its run died.
    const taken = await takeBackfillRequest(db);
    expect(taken).toMatchObject({ endpoint: "thin", start: new Date("2026-11-30T09:45:00.000Z"), end: new Date(RESOLVED) });
    expect(await takeBackfillRequest(db)).toBeUndefined();
    expect((await takeBackfillRequest(db, 0))?.id).toBe(taken!.id);
    expect(await finishBackfillRequest(db, taken!.id)).toBe(true);
    expect(await takeBackfillRequest(db, 0)).toBeUndefined();
  });

  test("`runWorker()` books the payment once when the health event arrives twice at once at two thin endpoints and both rows are applied concurrently", async () => {
    const two = stripeEndpoints([
      { name: "thin", secrets: [OTHER_SECRET], kind: "thin" },
      { name: "thin2", secrets: [OTHER_SECRET], kind: "thin" },
    ]);
    const app = createApp({ db, endpoints: two });
    const id = "evt_test_health_twice";
    const body = paidWithoutEvent(id);
    const outcomes = await Promise.all(
      ["thin", "thin2", "thin", "thin2"].map(async (name) => {
        const res = await app.fetch(await signedRequest(`${BASE}/${name}`, body, { secret: OTHER_SECRET }));
        return ((await res.json()) as { outcome: string }).outcome;
      }),
    );
    expect(outcomes.sort()).toEqual(["duplicate", "duplicate", "queued", "queued"]);
    // One claim takes both rows into two slots: their reads and transactions run at once, on their own connections.
    const lines = await drain({ concurrency: 2 });
    expect(lines.filter((l) => l.event_id === id).map((l) => l.outcome)).toEqual(["processed", "processed"]);
    expect(await count(db, "invoices", "status = 'paid'")).toBe(1);
    expect(await booked()).toEqual([{ invoice_id: "in_health_1", kind: "payment", amount: 4200 }] as never);
    expect(await count(db, "outbox")).toBe(1);
    expect(await db`select change_id from stripe_change_claims`).toEqual([{ change_id: id }] as never);
    // Each endpoint (each event destination) backfills its own events: one request each.
    expect(await db`select endpoint from event_backfill_requests where requested_by = ${id} order by endpoint`).toEqual([
      { endpoint: "thin" },
      { endpoint: "thin2" },
    ] as never);
  });

  test("a genuine event of the same change arriving after the health event (classic, then thin) books nothing more", async () => {
    const app = createApp({ db, endpoints: endpoints() });
    expect(await deliver(app, "thin", paidWithoutEvent("evt_test_health_then_genuine"))).toBe("queued");
    await drain();
    const classic = eventBody("evt_genuine_paid", "invoice.paid", PAID);
    expect(await deliver(app, "billing", classic)).toBe("processed");
    expect(await deliver(app, "thin", JSON.stringify(thinFromClassic(classic, "evt_test_thin_genuine_paid", false)))).toBe("queued");
    await drain();
    expect(await count(db, "invoices", "status = 'paid'")).toBe(1);
    expect(await booked()).toEqual([{ invoice_id: "in_health_1", kind: "payment", amount: 4200 }] as never);
    expect(await count(db, "outbox")).toBe(1);
    expect(await count(db, "webhook_inbox", "outcome = 'processed'")).toBe(3);
  });

  test("`runWorker()` reads the object of a connected account's health event with Stripe-Account set to the impact's context", async () => {
    const app = createApp({ db, endpoints: endpoints() });
    const id = "evt_test_health_connect";
    expect(await deliver(app, "thin", paidWithoutEvent(id, "acct_1HealthConnect"))).toBe("queued");
    const lines = await drain();
    expect(fake.store.requests.map((r) => `${r.path} ${r.account || "platform"}`)).toEqual([
      `/v2/core/events/${id} platform`,
      "/v1/invoices/in_health_1 acct_1HealthConnect",
    ]);
    expect(await count(db, "ledger_entries", "kind = 'payment'")).toBe(1);
    expect(String(lines.find((l) => l.event_id === id)?.note)).toContain("(invoice.paid, account acct_1HealthConnect)");
    // Its backfill reads that account's events.
    expect(await db`select endpoint, account from event_backfill_requests where requested_by = ${id}`).toEqual([
      { endpoint: "thin", account: "acct_1HealthConnect" },
    ] as never);
    expect(await takeBackfillRequest(db)).toMatchObject({ endpoint: "thin", account: "acct_1HealthConnect" });
  });

  test("a health event whose impact no handler applies (payment_intent.requires_action) is recorded without effect and without reading its object", async () => {
    const app = createApp({ db, endpoints: endpoints() });
    const id = "evt_test_health_unhandled";
    putHealthEvent(id, "payment_intent.requires_action", {
      id: "pi_health_1",
      type: "payment_intent",
      url: "/v1/payment_intents/pi_health_1",
    });
    expect(await deliver(app, "thin", JSON.stringify(healthNotification(id, CREATED)))).toBe("queued");
    const lines = await drain();
    expect(await db`select outcome, last_error from webhook_inbox`).toEqual([{ outcome: "processed", last_error: null }] as never);
    for (const table of ["invoices", "ledger_entries", "outbox", "stripe_change_claims"]) expect(await count(db, table)).toBe(0);
    expect(await count(db, "event_backfill_requests", `requested_by = '${id}'`)).toBe(1);
    expect(fake.store.requests.map((r) => r.path)).toEqual([`/v2/core/events/${id}`]);
    expect(String(lines.find((l) => l.event_id === id)?.note)).toStartWith(
      "no handler applies payment_intent.requires_action: payment_intent pi_health_1 (payment_intent.requires_action) not read; backfilling",
    );
  });

  test("`healthWindow()` ends at resolved_at (else created) and starts the lookback before it, saying so", () => {
    const at = (iso: string) => new Date(iso);
    expect(healthWindow({ created: CREATED, data: { resolved_at: "2026-12-01T09:00:00Z" } }, 3_600_000)).toEqual({
      start: at("2026-12-01T08:00:00Z"),
      end: at("2026-12-01T09:00:00Z"),
      basis: "1 h before data.resolved_at: the event names no start",
    });
    expect(healthWindow({ created: CREATED, data: {} }, 3_600_000)).toEqual({
      start: at("2026-12-01T09:00:00Z"),
      end: at(CREATED),
      basis: "1 h before the event's created (no data.resolved_at): the event names no start",
    });
  });
});

describe("related_object.url", () => {
  const nested = (type: "v1.person.updated" | "v2.core.account_person.updated", url: string, id: string): string => {
    const body: ThinBody<Stripe.Events.V1PersonUpdatedEventNotification> = {
      id,
      object: "v2.core.event",
      type: "v1.person.updated",
      created: "2026-12-01T10:00:00.000Z",
      livemode: false,
      context: "acct_1NestedUrl",
      related_object: { id: "person_1NestedUrl", type: "person", url },
    };
    return JSON.stringify({ ...body, type });
  };

  test.each(["sync", "async", "hybrid"] as const)(
    "an unhandled notification is answered 200 ignored in %s mode whatever its related_object.url, and nothing is read",
    async (mode) => {
      const app = createApp({
        db,
        endpoints: [{ name: "thin", provider: stripeThinProvider, route: "stripe", secrets: [OTHER_SECRET], handlers: thinHandlers, mode }],
      });
      const bodies = [
        nested("v1.person.updated", "/v1/accounts/acct_1NestedUrl/persons/person_1NestedUrl", "evt_test_nested_v1"),
        nested("v2.core.account_person.updated", "/v2/core/accounts/acct_1NestedUrl/persons/person_1NestedUrl", "evt_test_nested_v2"),
        nested("v1.person.updated", "https://elsewhere.example/v1/persons/person_1?x=1", "evt_test_nested_elsewhere"),
      ];
      for (const b of bodies) expect(await deliver(app, "thin", b)).toBe("ignored");
      expect(await count(db, "webhook_inbox", "outcome = 'ignored' and processed_at is not null")).toBe(3);
      expect(fake.store.requests).toEqual([]);
    },
  );

  test("`runWorker()` refuses a handled notification whose related_object.url is not a Stripe API path: needs-review, nothing fetched anywhere", async () => {
    let elsewhere = 0;
    const server = Bun.serve({
      hostname: "127.0.0.1",
      port: 0,
      fetch: () => (elsewhere++, Response.json({ id: "in_x", object: "invoice" })),
    });
    try {
      const app = createApp({ db, endpoints: endpoints() });
      fake.store.put("invoices", { ...invoice({ id: "in_x", status: "paid", amount_paid: 2000 }), created: 1_764_461_000 } as never);
      const classic = eventBody("evt_elsewhere", "invoice.paid", invoice({ id: "in_x", status: "paid", amount_paid: 2000 }));
      const urls = [
        `http://127.0.0.1:${server.port}/v1/invoices/in_x`,
        `//127.0.0.1:${server.port}/v1/invoices/in_x`,
        "/v1/invoices/../../v1/invoices/in_x",
        "/v1/invoices/in_x?expand[]=customer",
        "/v1/invoices/in%5Fx",
        "/v3/invoices/in_x",
      ];
      for (const [i, url] of urls.entries()) {
        const thin = thinFromClassic(classic, `evt_test_elsewhere_${i}`, false);
        expect(await deliver(app, "thin", JSON.stringify({ ...thin, related_object: { ...thin.related_object, url } }))).toBe("queued");
      }
      // A health event whose impact points off Stripe: its event is read, its object is not.
      putHealthEventElsewhere(`http://127.0.0.1:${server.port}/v1/invoices/in_x`);
      expect(await deliver(app, "thin", JSON.stringify(healthNotification("evt_test_health_elsewhere", "2026-12-01T10:00:00.000Z")))).toBe(
        "queued",
      );
      await drain();
      const rows = await db<{ event_id: string; parked: boolean; last_error: string }[]>`
        select event_id, needs_review_at is not null as parked, last_error from webhook_inbox order by event_id`;
      expect(rows.length).toBe(urls.length + 1);
      for (const row of rows) {
        expect(row.parked).toBe(true);
        expect(row.last_error).toContain("Refused to read related_object.url");
        expect(row.last_error).toContain("not a Stripe API path");
      }
      expect(elsewhere).toBe(0);
      expect(fake.store.requests.map((r) => r.path)).toEqual(["/v2/core/events/evt_test_health_elsewhere"]);
      expect(await count(db, "invoices")).toBe(0);
      expect(await count(db, "event_backfill_requests")).toBe(0);
    } finally {
      await server.stop(true);
    }
  });

  function putHealthEventElsewhere(url: string): void {
    const data: HealthEventData = {
      alert_id: "halert_elsewhere",
      grouping_key: "_grouping_elsewhere",
      impact: { event_type: "invoice.paid", related_object: { id: "in_x", type: "invoice", url } },
      resolved_at: "2026-12-01T09:45:00.000Z",
      summary: "Stripe failed to generate events",
    };
    fake.store.put(V2_EVENTS, {
      ...healthEvent("evt_test_health_elsewhere", "2026-12-01T10:00:00.000Z", data),
      created: 1_764_583_200,
    } as never);
  }
});

describe("a worker without Stripe API settings", () => {
  test("`runWorker()` without a fetcher never claims thin rows: they wait untouched for a worker that has the API, classic rows are processed", async () => {
    const app = createApp({ db, endpoints: endpoints() });
    const [created, finalized] = lifecycleWithStore();
    expect(await deliver(app, "thin", JSON.stringify(thinFromClassic(created!.body, "evt_test_thin_nofetch")))).toBe("queued");
    const classic = createApp({ db, endpoints: stripeEndpoints([{ name: "billing", secrets: [SECRET], mode: "async" }]) });
    expect(await deliver(classic, "billing", finalized!.body)).toBe("queued");
    const pool = connect(fresh.url, { max: 2 });
    const controller = new AbortController();
    const lines: Record<string, unknown>[] = [];
    const worker = runWorker({
      db: pool,
      tables: workerHandlerTables(true),
      signal: controller.signal,
      pollMs: 20,
      backoff: { baseMs: 5, capMs: 20 },
      log: (line) => lines.push(line),
    });
    try {
      await waitUntil(
        "the classic row processed",
        async () => (await count(db, "webhook_inbox", "provider = 'stripe' and outcome = 'processed'")) === 1,
      );
      await Bun.sleep(200); // several more claim rounds
    } finally {
      controller.abort();
      await worker;
      await pool.end({ timeout: 5 });
    }
    const [row] =
      await db`select attempts, defers, last_error, processed_at, needs_review_at from webhook_inbox where provider = 'stripe-thin'`;
    expect(row).toEqual({ attempts: 0, defers: 0, last_error: null, processed_at: null, needs_review_at: null });
    expect(lines.filter((l) => l.event_id === "evt_test_thin_nofetch")).toEqual([]);
  });
});

describe("bun run worker", () => {
  test("`bun run worker` with a thin endpoint and no STRIPE_API_KEY exits 2 naming the key and the endpoint", async () => {
    const child = Bun.spawn([process.execPath, "src/bin/worker.ts"], {
      cwd: `${import.meta.dir}/../..`,
      // Settings are checked before any database is opened; the worker needs no webhook secret.
      env: { PATH: process.env.PATH ?? "", STRIPE_ENDPOINTS: "events", STRIPE_ENDPOINT_KIND_EVENTS: "thin" },
      stdin: "ignore",
      stdout: "pipe",
      stderr: "pipe",
      timeout: 20_000,
    });
    const [stderr, code] = await Promise.all([new Response(child.stderr).text(), child.exited]);
    expect(code).toBe(2);
    expect(stderr).toContain("STRIPE_API_KEY is required for this command");
    expect(stderr).toContain("thin endpoints: events");
  }, 30_000);
});
