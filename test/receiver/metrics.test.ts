// GET /metrics through createApp(...).fetch(): the Prometheus text parsed with parse-prometheus-text-format,
// delivery counters and the duration histogram per endpoint, backlog gauges read from real PostgreSQL,
// the optional bearer token, an unreachable database, and bounded label cardinality.
import { afterAll, beforeEach, describe, expect, test } from "bun:test";
import parsePrometheusTextFormat, { type PrometheusFamily } from "parse-prometheus-text-format";
import { createApp, type AppDeps, type App } from "../../src/receiver/app.ts";
import { connect, type Db } from "../../src/db/db.ts";
import { stripeEndpoints } from "../../src/receiver/endpoints.ts";
import { billingHandlers } from "../../src/handlers/billing.ts";
import { receiveAsync, type ReceiveTarget } from "../../src/receiver/receive.ts";
import { insertInbox } from "../../src/inbox/inbox.ts";
import { fillInboxHours } from "../../src/inbox/hours.ts";
import {
  backdateInbox,
  closeAll,
  connections,
  count,
  eventBody,
  freshDatabase,
  invoice,
  OTHER_SECRET,
  SECRET,
  signedRequest,
  verified,
  inboxRowFor,
} from "../support/helpers.ts";

const fresh = await freshDatabase();
const db = fresh.db;
afterAll(() => fresh.drop());
beforeEach(async () => {
  await db`truncate webhook_inbox, webhook_inbox_payloads, outbox, ledger_entries, invoices, loop_heartbeats, reconcile_runs,
                    webhook_inbox_hours, webhook_inbox_hours_filled`;
});

const BASE = "http://receiver.test";
const CONFIGURED = ["billing", "payments", "refunds"];
const ENDPOINTS = stripeEndpoints(CONFIGURED.map((name) => ({ name, secrets: [SECRET] })));
const HISTOGRAM = "webhook_processing_duration_seconds";

function makeApp(overrides: Partial<AppDeps> = {}): App {
  return createApp({ db, endpoints: ENDPOINTS, log: () => {}, ...overrides });
}

let seq = 0;
/** A fresh event of `type` for its own invoice (2000 usd paid); `customer: undefined` makes billing fail permanently. */
function event(type = "invoice.paid", overrides: Record<string, unknown> = {}): { eventId: string; body: string } {
  const n = ++seq;
  const eventId = `evt_metrics_${n}`;
  return { eventId, body: eventBody(eventId, type, invoice({ id: `in_metrics_${n}`, amount_paid: 2000, status: "paid", ...overrides })) };
}

/** Posts `body` signed with `secret` to `/webhooks/stripe/<endpoint>` and returns the status and JSON reply. */
async function deliver(
  app: App,
  endpoint: string,
  body: string,
  secret = SECRET,
): Promise<{ status: number; reply: { outcome?: string; error?: string } }> {
  const response = await app.fetch(await signedRequest(`${BASE}/webhooks/stripe/${endpoint}`, body, { secret }));
  return { status: response.status, reply: (await response.json()) as { outcome?: string; error?: string } };
}

interface Scrape {
  response: Response;
  text: string;
  families: PrometheusFamily[];
}

async function scrape(app: App, headers: Record<string, string> = {}): Promise<Scrape> {
  const response = await app.fetch(new Request(`${BASE}/metrics`, { headers }));
  const text = await response.text();
  return { response, text, families: response.status === 200 ? parsePrometheusTextFormat(text) : [] };
}

function family(families: PrometheusFamily[], name: string): PrometheusFamily | undefined {
  return families.find((f) => f.name === name);
}

/** Every sample of the family `name` as labels and a number. */
function samples(families: PrometheusFamily[], name: string): { labels: Record<string, string>; value: number }[] {
  return (family(families, name)?.metrics ?? []).map((m) => ({ labels: m.labels ?? {}, value: Number(m.value) }));
}

const sameLabels = (a: Record<string, string>, b: Record<string, string>) =>
  Object.keys(a).length === Object.keys(b).length && Object.entries(b).every(([k, v]) => a[k] === v);

/** The value of the sample of `name` with exactly `labels`; 0 when absent (counters appear on first use). */
function valueOf(families: PrometheusFamily[], name: string, labels: Record<string, string>): number {
  return samples(families, name).find((s) => sameLabels(s.labels, labels))?.value ?? 0;
}

/** Delivery counter of one endpoint and outcome (and reason, for rejections). */
function deliveries(families: PrometheusFamily[], endpoint: string, outcome: string, reason?: string): number {
  return valueOf(families, "webhook_deliveries_total", { provider: "stripe", endpoint, outcome, ...(reason ? { reason } : {}) });
}

/**
 * The duration histogram's series per endpoint. The library folds a labelled histogram into one
 * unlabelled bucket map without counts, so its samples are read from the text with the histogram's
 * TYPE line removed: each `_bucket`, `_sum` and `_count` line then parses as a plain labelled sample.
 */
function histogram(text: string): Map<string, { buckets: [number, number][]; sum: number; count: number }> {
  const plain = parsePrometheusTextFormat(
    text
      .split("\n")
      .filter((line) => line !== `# TYPE ${HISTOGRAM} histogram`)
      .join("\n"),
  );
  const series = new Map<string, { buckets: [number, number][]; sum: number; count: number }>();
  const of = (labels: Record<string, string>) => {
    const key = `${labels.provider}/${labels.endpoint}`;
    const s = series.get(key) ?? { buckets: [], sum: Number.NaN, count: Number.NaN };
    series.set(key, s);
    return s;
  };
  for (const f of plain) {
    for (const m of f.metrics) {
      const labels = m.labels ?? {};
      if (f.name === `${HISTOGRAM}_bucket`) of(labels).buckets.push([labels.le === "+Inf" ? Infinity : Number(labels.le), Number(m.value)]);
      if (f.name === `${HISTOGRAM}_sum`) of(labels).sum = Number(m.value);
      if (f.name === `${HISTOGRAM}_count`) of(labels).count = Number(m.value);
    }
  }
  return series;
}

/** Every value of the `endpoint` label anywhere in the exposition. */
function endpointLabels(families: PrometheusFamily[]): Set<string> {
  const found = new Set<string>();
  for (const f of families) for (const m of f.metrics) if (m.labels?.endpoint !== undefined) found.add(m.labels.endpoint);
  return found;
}

describe("GET /metrics", () => {
  test("`GET /metrics` answers Prometheus text that parses into counter, histogram and gauge families with numeric values", async () => {
    const app = makeApp();
    expect((await deliver(app, "billing", event().body)).reply.outcome).toBe("processed");
    const { response, families } = await scrape(app);
    expect(response.status).toBe(200);
    expect(response.headers.get("content-type")).toBe("text/plain; version=0.0.4; charset=utf-8");
    expect(Object.fromEntries(families.map((f) => [f.name, f.type]))).toEqual({
      webhook_backfill_checkpoint_age_seconds: "GAUGE",
      webhook_backfill_requests_unfinished: "GAUGE",
      webhook_backfill_request_oldest_age_seconds: "GAUGE",
      webhook_deliveries_total: "COUNTER",
      [HISTOGRAM]: "HISTOGRAM",
      webhook_inbox_backlog_up: "GAUGE",
      webhook_inbox_held: "GAUGE",
      webhook_inbox_unprocessed: "GAUGE",
      webhook_inbox_oldest_unprocessed_age_seconds: "GAUGE",
      webhook_inbox_pause_age_seconds: "GAUGE",
      webhook_inbox_paused: "GAUGE",
      webhook_inbox_needs_review: "GAUGE",
      webhook_outbox_pending: "GAUGE",
      webhook_outbox_oldest_pending_age_seconds: "GAUGE",
      webhook_outbox_needs_review: "GAUGE",
      webhook_processes_alive: "GAUGE",
      webhook_inbox_last_received_age_seconds: "GAUGE",
      webhook_inbox_longest_gap_seconds: "GAUGE",
      webhook_reconcile_drifted: "GAUGE",
      webhook_reconcile_repaired: "GAUGE",
      webhook_reconcile_last_run_age_seconds: "GAUGE",
    });
    for (const f of families) expect(f.help.length).toBeGreaterThan(0);
    for (const f of families.filter((x) => x.type !== "HISTOGRAM")) {
      for (const m of f.metrics) expect(Number.isFinite(Number(m.value))).toBe(true);
    }
    expect(valueOf(families, "webhook_inbox_backlog_up", {})).toBe(1);
  });

  test("`webhook_deliveries_total` moves by one per delivery, by outcome and endpoint, and the histogram counts every delivery", async () => {
    const app = makeApp();
    const first = event();
    expect((await deliver(app, "billing", first.body)).reply.outcome).toBe("processed");
    const before = (await scrape(app)).families;
    expect(deliveries(before, "billing", "processed")).toBe(1);

    expect(await deliver(app, "billing", event().body)).toEqual({ status: 200, reply: expect.objectContaining({ outcome: "processed" }) });
    expect(await deliver(app, "billing", event().body)).toEqual({ status: 200, reply: expect.objectContaining({ outcome: "processed" }) });
    expect(await deliver(app, "billing", first.body)).toEqual({ status: 200, reply: expect.objectContaining({ outcome: "duplicate" }) });
    expect(await deliver(app, "billing", event("customer.created").body)).toEqual({
      status: 200,
      reply: expect.objectContaining({ outcome: "ignored" }),
    });
    expect(await deliver(app, "billing", event("invoice.paid", { customer: undefined }).body)).toEqual({
      status: 200,
      reply: expect.objectContaining({ outcome: "needs_review" }),
    });
    for (let i = 0; i < 3; i++) {
      expect(await deliver(app, "billing", event().body, OTHER_SECRET)).toEqual({
        status: 400,
        reply: expect.objectContaining({ error: "signature_mismatch" }),
      });
    }
    expect(await deliver(app, "payments", event().body)).toEqual({ status: 200, reply: expect.objectContaining({ outcome: "processed" }) });
    expect(await deliver(app, "payments", first.body)).toEqual({ status: 200, reply: expect.objectContaining({ outcome: "processed" }) }); // another endpoint: its own row
    expect(await count(db, "webhook_inbox")).toBe(7);

    const { families, text } = await scrape(app);
    const delta = (endpoint: string, outcome: string, reason?: string) =>
      deliveries(families, endpoint, outcome, reason) - deliveries(before, endpoint, outcome, reason);
    expect(delta("billing", "processed")).toBe(2);
    expect(delta("billing", "duplicate")).toBe(1);
    expect(delta("billing", "ignored")).toBe(1);
    expect(delta("billing", "needs_review")).toBe(1);
    expect(delta("billing", "rejected", "signature_mismatch")).toBe(3);
    expect(delta("payments", "processed")).toBe(2);
    expect(delta("payments", "duplicate")).toBe(0);
    expect(delta("payments", "rejected", "signature_mismatch")).toBe(0);
    expect(samples(families, "webhook_deliveries_total").filter((s) => s.labels.endpoint === "refunds")).toEqual([]);
    // A rejection is counted with its reason only, never as a bare `rejected`.
    expect(
      samples(families, "webhook_deliveries_total")
        .filter((s) => s.labels.outcome === "rejected")
        .map((s) => s.labels),
    ).toEqual([{ provider: "stripe", endpoint: "billing", outcome: "rejected", reason: "signature_mismatch" }]);

    const series = histogram(text);
    expect([...series.keys()].sort()).toEqual(["stripe/billing", "stripe/payments"]);
    const total = (endpoint: string) =>
      samples(families, "webhook_deliveries_total")
        .filter((s) => s.labels.endpoint === endpoint)
        .reduce((n, s) => n + s.value, 0);
    for (const [key, s] of series) {
      const endpoint = key.split("/")[1] ?? "";
      expect(s.count).toBe(total(endpoint));
      expect(s.buckets.at(-1)).toEqual([Infinity, s.count]);
      const counts = s.buckets.map(([, n]) => n);
      expect(counts).toEqual([...counts].sort((a, b) => a - b)); // cumulative
      expect(s.sum).toBeGreaterThanOrEqual(0);
    }
    expect(series.get("stripe/billing")?.count).toBe(9);
    expect(series.get("stripe/payments")?.count).toBe(2);
  });

  test("an unknown endpoint path creates no new label value: `/metrics` cardinality stays bounded", async () => {
    const app = makeApp();
    expect((await deliver(app, "billing", event().body)).status).toBe(200);
    const before = await scrape(app);

    for (const path of ["/webhooks/stripe/nope", "/webhooks/stripe/nope-2", "/webhooks/github", "/webhooks/github/billing"]) {
      const response = await app.fetch(await signedRequest(`${BASE}${path}`, event().body));
      expect(response.status).toBe(404);
    }
    const after = await scrape(app);
    expect(endpointLabels(after.families)).toEqual(new Set(CONFIGURED));
    expect(samples(after.families, "webhook_deliveries_total")).toEqual(samples(before.families, "webhook_deliveries_total"));
    expect(histogram(after.text)).toEqual(histogram(before.text));
    expect(after.text).not.toContain("nope");
    expect(after.text).not.toContain("github");
  });

  test("backlog gauges report unprocessed and needs-review rows from the database, and configured endpoints with 0", async () => {
    const billing: ReceiveTarget = { provider: "stripe", endpoint: "billing", handlers: billingHandlers };
    const app = makeApp();
    const waiting = event();
    expect(await receiveAsync(db, billing, verified(waiting.body))).toBe("queued");
    expect(await receiveAsync(db, billing, verified(event().body))).toBe("queued");
    await backdateInbox(db, waiting.eventId, 10 * 60_000);
    // A PermanentError (no customer) is parked as needs-review at once.
    expect(await deliver(app, "payments", event("invoice.paid", { customer: undefined }).body)).toEqual({
      status: 200,
      reply: expect.objectContaining({ outcome: "needs_review" }),
    });
    expect((await deliver(app, "billing", event().body)).reply.outcome).toBe("processed"); // settled: in no gauge

    // Rows of endpoints that are not configured (any more) add no label values: summed under _unconfigured.
    for (const [provider, endpoint, parked] of [
      ["stripe", "legacy_eu", false],
      ["github", "push", true],
    ] as const) {
      // Recorded as any delivery is (a state row and its payload row), queued or parked at once.
      const inserted = await insertInbox(db, [
        inboxRowFor(
          { provider, endpoint, eventId: `evt_metrics_old_${endpoint}` },
          {
            type: "invoice.paid",
            ...(parked ? { failed: { error: "Error: parked by hand", parked: true, backoff: { baseMs: 60_000, capMs: 600_000 } } } : {}),
          },
        ),
      ]);
      expect(inserted.size).toBe(1);
    }

    const { families } = await scrape(app);
    expect(valueOf(families, "webhook_inbox_backlog_up", {})).toBe(1);
    const gauge = (name: string) =>
      Object.fromEntries(samples(families, name).map((s) => [`${s.labels.provider}/${s.labels.endpoint}`, s.value]));
    expect(gauge("webhook_inbox_unprocessed")).toEqual({
      "stripe/billing": 2,
      "stripe/payments": 0,
      "stripe/refunds": 0,
      "_unconfigured/_unconfigured": 1,
    });
    expect(gauge("webhook_inbox_needs_review")).toEqual({
      "stripe/billing": 0,
      "stripe/payments": 1,
      "stripe/refunds": 0,
      "_unconfigured/_unconfigured": 1,
    });
    const age = gauge("webhook_inbox_oldest_unprocessed_age_seconds");
    expect(age["stripe/billing"]).toBeGreaterThanOrEqual(600);
    expect(age["stripe/billing"]).toBeLessThan(1_200);
    expect(age["stripe/payments"]).toBe(0);
    expect(age["stripe/refunds"]).toBe(0);

    // Gauges are read at scrape time: once the rows are settled, they fall back to 0.
    await db`update webhook_inbox set processed_at = now(), outcome = 'processed', needs_review_at = null where processed_at is null`;
    const settled = (await scrape(app)).families;
    expect(samples(settled, "webhook_inbox_unprocessed").map((s) => s.value)).toEqual([0, 0, 0]);
    expect(samples(settled, "webhook_inbox_needs_review").map((s) => s.value)).toEqual([0, 0, 0]);
  });

  test("outbox gauges report unpublished rows (pending, oldest age, needs-review) and fall to 0 once published", async () => {
    const app = makeApp();
    expect((await deliver(app, "billing", event().body)).reply.outcome).toBe("processed"); // books one payment: one outbox row
    expect((await deliver(app, "billing", event().body)).reply.outcome).toBe("processed");
    await db`update outbox set created_at = now() - interval '10 minutes' where id = (select min(id) from outbox)`;
    await db`update outbox set needs_review_at = now(), last_error = 'Error: sink down' where id = (select max(id) from outbox)`;
    await db`
      insert into outbox (aggregate_type, aggregate_id, event_type, payload, published_at)
      values ('invoice', 'in_published', 'InvoicePaymentBooked', '{}', now())
    `;
    const { families } = await scrape(app);
    expect(valueOf(families, "webhook_outbox_pending", {})).toBe(1);
    expect(valueOf(families, "webhook_outbox_needs_review", {})).toBe(1);
    const age = valueOf(families, "webhook_outbox_oldest_pending_age_seconds", {});
    expect(age).toBeGreaterThanOrEqual(600);
    expect(age).toBeLessThan(1_200);

    await db`update outbox set published_at = now(), needs_review_at = null where published_at is null`;
    const settled = (await scrape(app)).families;
    const present = (name: string) => samples(settled, name).map((s) => s.value);
    expect([
      present("webhook_outbox_pending"),
      present("webhook_outbox_oldest_pending_age_seconds"),
      present("webhook_outbox_needs_review"),
    ]).toEqual([[0], [0], [0]]);
  });

  test("with `metricsToken` set, `/metrics` answers 401 without or with a wrong bearer token and 200 with the right one", async () => {
    const token = "metrics-token-0123456789";
    const app = makeApp({ metricsToken: token });
    const refused: Record<string, string>[] = [
      {},
      { authorization: "Bearer wrong" },
      { authorization: "Bearer metrics-token-0123456780" },
      { authorization: token },
      { authorization: `Basic ${token}` },
    ];
    for (const headers of refused) {
      const { response, text } = await scrape(app, headers);
      expect(response.status).toBe(401);
      expect(response.headers.get("www-authenticate")).toBe("Bearer");
      expect(JSON.parse(text)).toMatchObject({ error: "unauthorized" });
      expect(text).not.toContain(token);
      expect(text).not.toContain("webhook_deliveries_total");
    }
    const ok = await scrape(app, { authorization: `Bearer ${token}` });
    expect(ok.response.status).toBe(200);
    expect(valueOf(ok.families, "webhook_inbox_backlog_up", {})).toBe(1);
  });

  test("with its own `probeDb`, `/metrics` reads the backlog while the only delivery connection waits on a row lock; on the shared pool it cannot", async () => {
    const [locker, deliveries, probes] = connections(fresh.url, 3) as [Db, Db, Db];
    const created = event("invoice.created", { status: "draft", amount_paid: 0 });
    const invoiceId = created.eventId.replace("evt_", "in_");
    try {
      expect((await deliver(makeApp(), "billing", created.body)).reply.outcome).toBe("processed");
      const [lockerPid, deliveryPid] = await Promise.all(
        [locker, deliveries].map(async (d) => (await d<{ pid: number }[]>`select pg_backend_pid() as pid`)[0]?.pid),
      );
      let release = () => {};
      const held = new Promise<void>((resolve) => (release = resolve));
      let locked = false;
      const lock = locker.begin(async (tx) => {
        await tx`select 1 from invoices where id = ${invoiceId} for update`;
        locked = true;
        await held;
      });
      while (!locked) await Bun.sleep(10);

      const shared = makeApp({ db: deliveries });
      const own = makeApp({ db: deliveries, probeDb: probes });
      const paid = eventBody(`evt_metrics_locked_${seq}`, "invoice.paid", invoice({ id: invoiceId, amount_paid: 2000, status: "paid" }));
      const stuck = deliver(shared, "billing", paid);
      for (let waited = 0; ; waited += 10) {
        const [row] = await db<
          { blocked: boolean }[]
        >`select ${lockerPid ?? -1}::int = any(pg_blocking_pids(${deliveryPid ?? -1}::int)) as blocked`;
        if (row?.blocked) break;
        if (waited > 10_000) throw new Error("the delivery never waited on the invoice lock");
        await Bun.sleep(10);
      }

      const ownScrape = await scrape(own);
      expect(valueOf(ownScrape.families, "webhook_inbox_backlog_up", {})).toBe(1);
      // postgres.js pipelines the scrape behind the blocked delivery on the shared pool: read times out (2 s).
      const sharedScrape = await scrape(shared);
      expect(valueOf(sharedScrape.families, "webhook_inbox_backlog_up", {})).toBe(0);

      release();
      await lock;
      expect(await stuck).toEqual({ status: 200, reply: expect.objectContaining({ outcome: "processed" }) });
      expect(await count(db, "ledger_entries", `invoice_id = '${invoiceId}'`)).toBe(1);
    } finally {
      await closeAll([locker, deliveries, probes]);
    }
  }, 30_000);

  test("a scrape blocked by a table lock reports `backlog_up 0` and does not hold up `/readyz` on the same probe connection", async () => {
    const [locker, probes] = connections(fresh.url, 2) as [Db, Db];
    try {
      let release = () => {};
      const held = new Promise<void>((resolve) => (release = resolve));
      let locked = false;
      const lock = locker.begin(async (tx) => {
        await tx`lock table outbox in access exclusive mode`; // what a migration or VACUUM FULL takes
        locked = true;
        await held;
      });
      while (!locked) await Bun.sleep(10);
      const app = makeApp({ probeDb: probes });
      const { families } = await scrape(app);
      expect(family(families, "webhook_inbox_backlog_up")?.metrics).toEqual([{ value: "0" }]);
      // PostgreSQL cancelled the blocked read, so the single probe connection is free again at once.
      const ready = await app.fetch(new Request(`${BASE}/readyz`));
      expect(ready.status).toBe(200);
      release();
      await lock;
      expect(valueOf((await scrape(app)).families, "webhook_inbox_backlog_up", {})).toBe(1);
    } finally {
      await closeAll([locker, probes]);
    }
  }, 30_000);

  test("health gauges: live workers and dispatchers by kind, each endpoint's silence and longest gap of 7 days, the latest reconciliation's drift", async () => {
    await db`
      insert into loop_heartbeats (id, kind, host, pid, beat_every_ms, beat_at, stopped_at)
      values ('w1', 'worker', 'a', 1, 10000, now(), null),
             ('w2', 'worker', 'b', 2, 10000, now() - interval '5 minutes', null),
             ('d1', 'dispatcher', 'c', 3, 10000, now(), now())
    `;
    await db`
      insert into reconcile_runs (kind, account, since, checked, drifted, repaired)
      values ('invoices', '', now() - interval '30 days', 40, 3, 2), ('invoices', 'acct_1', now() - interval '30 days', 5, 1, 0),
             ('refunds', '', now() - interval '30 days', 9, 0, 0)
    `;
    // billing: an event every 10 minutes for 3 days, the last 2 hours ago; payments: never; an unconfigured endpoint: an hour ago.
    await db`
      insert into webhook_inbox (provider, endpoint, event_id, event_type, received_at, processed_at, outcome)
      select 'stripe', 'billing', 'evt_gap_' || n, 'invoice.paid', t, t, 'processed'
        from generate_series(0, 431) n, lateral (select now() - interval '2 hours' - n * interval '10 minutes' as t) x
      union all
      select 'stripe', 'elsewhere', 'evt_gap_other', 'invoice.paid', now() - interval '1 hour', now(), 'processed'
    `;
    const app = makeApp();
    // Each scrape computes one closed hour of the rollup, newest first.
    const filled = async () => (await db<{ n: number }[]>`select count(*)::int as n from webhook_inbox_hours_filled`)[0]!.n;
    await scrape(app);
    expect(await filled()).toBe(1);
    await scrape(app);
    expect(await filled()).toBe(2);
    await fillInboxHours(db, { maxHours: 1000 }); // what the operator's page and earlier scrapes did
    const { families } = await scrape(app);
    expect(samples(families, "webhook_processes_alive")).toEqual([
      { labels: { kind: "worker" }, value: 1 },
      { labels: { kind: "dispatcher" }, value: 0 },
    ]);
    const silence = samples(families, "webhook_inbox_last_received_age_seconds");
    expect(silence.map((s) => s.labels)).toEqual([{ provider: "stripe", endpoint: "billing" }]);
    expect(silence[0]!.value).toBeGreaterThanOrEqual(7200);
    expect(silence[0]!.value).toBeLessThan(7200 + 60);
    expect(samples(families, "webhook_inbox_longest_gap_seconds")).toEqual([
      { labels: { provider: "stripe", endpoint: "billing" }, value: 600 },
    ]);
    // What WebhookProviderSilent compares: this silence is longer than any gap of the week.
    expect(silence[0]!.value).toBeGreaterThan(
      valueOf(families, "webhook_inbox_longest_gap_seconds", { provider: "stripe", endpoint: "billing" }),
    );
    expect(samples(families, "webhook_reconcile_drifted")).toEqual([
      { labels: { kind: "invoices" }, value: 4 },
      { labels: { kind: "refunds" }, value: 0 },
    ]);
    expect(valueOf(families, "webhook_reconcile_repaired", { kind: "invoices" })).toBe(2);
    expect(valueOf(families, "webhook_reconcile_last_run_age_seconds", { kind: "refunds" })).toBeLessThan(60);
  });

  test("with an unreachable database `/metrics` still answers 200 with `webhook_inbox_backlog_up 0` and no backlog gauges", async () => {
    const down = connect("postgres://postgres:postgres@127.0.0.1:1/x", { connectTimeoutSec: 1 });
    try {
      const app = createApp({ db: down, endpoints: ENDPOINTS, log: () => {} });
      expect(await deliver(app, "billing", event().body)).toEqual({
        status: 503,
        reply: expect.objectContaining({ error: "database_unavailable" }),
      });
      const { response, families } = await scrape(app);
      expect(response.status).toBe(200);
      expect(valueOf(families, "webhook_inbox_backlog_up", {})).toBe(0);
      expect(family(families, "webhook_inbox_backlog_up")?.metrics).toEqual([{ value: "0" }]);
      expect(family(families, "webhook_inbox_unprocessed")).toBeUndefined();
      expect(family(families, "webhook_inbox_needs_review")).toBeUndefined();
      expect(family(families, "webhook_outbox_pending")).toBeUndefined();
      expect(deliveries(families, "billing", "rejected", "database_unavailable")).toBe(1);
    } finally {
      await down.end({ timeout: 1 });
    }
  }, 15_000);
});
