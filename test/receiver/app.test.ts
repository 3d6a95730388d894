import { afterAll, beforeEach, describe, expect, test } from "bun:test";
import { createApp, type AppDeps, type Endpoint } from "../../src/receiver/app.ts";
import { createBodyBudget } from "../../src/receiver/body-budget.ts";
import { claimBatch } from "../../src/worker/claim.ts";
import { connect } from "../../src/db/db.ts";
import { mulberry32, shuffleInPlace } from "../../src/dev/random.ts";
import { stripeEndpoints } from "../../src/receiver/endpoints.ts";
import type { HandlerTable } from "../../src/handlers/handler-table.ts";
import { billingHandlers } from "../../src/handlers/billing.ts";
import { workOff } from "../support/work.ts";
import { signStripePayload, stripeProvider } from "../../src/providers/stripe.ts";
import { waitUntil } from "../support/wait-until.ts";
import { count, eventBody, fixture, freshDatabase, invoice, lifecycle, OTHER_SECRET, SECRET, signedRequest } from "../support/helpers.ts";

const fresh = await freshDatabase();
const db = fresh.db;
afterAll(() => fresh.drop());
beforeEach(async () => {
  await db`truncate webhook_inbox, webhook_inbox_payloads, outbox, ledger_entries, invoices`;
});

const BASE = "http://receiver.test";
const URL_DEFAULT = `${BASE}/webhooks/stripe`;
// A fixed clock: every signature below is made relative to it, so no test depends on wall time.
const NOW_SEC = 1_764_470_000;
const now = (): number => NOW_SEC * 1000;
const THIRD_SECRET = "whsec_test_thirdsecretnotconfigured00";

const CREATED = "01_invoice.created_evt_1SkB1aLgUG5tbmjc0created.json";
const CREATED_ID = "evt_1SkB1aLgUG5tbmjc0created";
const PAID = "03_invoice.paid_evt_1SkB1cLgUG5tbmjc0paidxx.json";
const PLAN = "12_plan.created_evt_1Pgc76B7WZ01zgkWwyRHS12y.json";
const PLAN_ID = "evt_1Pgc76B7WZ01zgkWwyRHS12y";

interface Reply {
  outcome?: string;
  event_id?: string;
  error?: string;
  message?: string;
  status?: string;
}

/** An app on the test database with the billing endpoint (or `endpoints`), the fixed clock and a captured log. */
function makeApp(overrides: Partial<AppDeps> = {}, lines: Record<string, unknown>[] = []) {
  return createApp({
    db,
    endpoints: stripeEndpoints([{ name: "billing", secrets: [SECRET] }]),
    now,
    log: (line) => lines.push(line),
    ...overrides,
  });
}

/** Signs `body` at the fixed clock (or `timestampSec`) and posts it to `url`. */
function signed(
  body: string,
  options: { url?: string; secret?: string; timestampSec?: number; headers?: Record<string, string> } = {},
): Promise<Request> {
  return signedRequest(options.url ?? URL_DEFAULT, body, { timestampSec: NOW_SEC, ...options });
}

/** A POST with an explicit Stripe-Signature header (or none). */
function post(body: BodyInit, signature: string | undefined, url = URL_DEFAULT, headers: Record<string, string> = {}): Request {
  const h: Record<string, string> = { "content-type": "application/json; charset=utf-8", ...headers };
  if (signature !== undefined) h["stripe-signature"] = signature;
  return new Request(url, { method: "POST", headers: h, body });
}

async function reply(response: Response): Promise<{ status: number; body: Reply; text: string }> {
  const text = await response.text();
  return { status: response.status, body: JSON.parse(text) as Reply, text };
}

async function tableCounts() {
  return {
    inbox: await count(db, "webhook_inbox"),
    invoices: await count(db, "invoices"),
    ledger: await count(db, "ledger_entries"),
    outbox: await count(db, "outbox"),
  };
}

async function expectNothingWritten(): Promise<void> {
  expect(await tableCounts()).toEqual({ inbox: 0, invoices: 0, ledger: 0, outbox: 0 });
  expect(await count(db, "webhook_inbox_payloads")).toBe(0);
}

/** The `v1` value of a header made by Stripe's test helper. */
function v1Of(header: string): string {
  const v1 = header.split(",").find((p) => p.startsWith("v1="));
  if (!v1) throw new Error("no v1 in test header");
  return v1.slice(3);
}

function streamOf(text: string, chunkBytes: number): ReadableStream<Uint8Array> {
  const bytes = new TextEncoder().encode(text);
  let offset = 0;
  return new ReadableStream({
    pull(controller) {
      if (offset >= bytes.length) return controller.close();
      controller.enqueue(bytes.slice(offset, offset + chunkBytes));
      offset += chunkBytes;
    },
  });
}

describe("accepted deliveries", () => {
  test("`createApp()` answers 200 processed for a valid event and records it with its business change", async () => {
    const res = await reply(await makeApp().fetch(await signed(fixture(CREATED))));
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ outcome: "processed", event_id: CREATED_ID });
    expect(await tableCounts()).toEqual({ inbox: 1, invoices: 1, ledger: 0, outbox: 0 });
    const [row] = await db`select provider, endpoint, event_id, event_type, outcome, processed_at is not null as done from webhook_inbox`;
    expect(row).toEqual({
      provider: "stripe",
      endpoint: "billing",
      event_id: CREATED_ID,
      event_type: "invoice.created",
      outcome: "processed",
      done: true,
    });
    const [inv] = await db`select id, status from invoices`;
    expect(inv).toEqual({ id: "in_1SkA1pLgUG5tbmjcQ7nB2vXa", status: "draft" });
  });

  test("`createApp()` answers 200 duplicate for a redelivery and writes nothing more", async () => {
    const app = makeApp();
    const paid = fixture(PAID);
    expect((await reply(await app.fetch(await signed(paid)))).body.outcome).toBe("processed");
    const again = await reply(await app.fetch(await signed(paid, { timestampSec: NOW_SEC - 10 })));
    expect(again.status).toBe(200);
    expect(again.body).toEqual({ outcome: "duplicate", event_id: "evt_1SkB1cLgUG5tbmjc0paidxx" });
    expect(await tableCounts()).toEqual({ inbox: 1, invoices: 1, ledger: 1, outbox: 1 });
  });

  test("`createApp()` answers 200 ignored for an unsubscribed type and records the row as ignored", async () => {
    const app = makeApp();
    const res = await reply(await app.fetch(await signed(fixture(PLAN))));
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ outcome: "ignored", event_id: PLAN_ID });
    const rows = await db`select event_id, event_type, outcome, processed_at is not null as done from webhook_inbox`;
    expect([...rows]).toEqual([{ event_id: PLAN_ID, event_type: "plan.created", outcome: "ignored", done: true }]);
    expect(await tableCounts()).toEqual({ inbox: 1, invoices: 0, ledger: 0, outbox: 0 });
    const again = await reply(await app.fetch(await signed(fixture(PLAN))));
    expect(again.body).toEqual({ outcome: "duplicate", event_id: PLAN_ID });
  });
});

describe("async group commit under a delivery limit", () => {
  test("`createApp()` with maxInFlight 2 records 12 concurrent async deliveries in groups of more than 2: a group holds one slot, not one per delivery", async () => {
    const endpoints = stripeEndpoints([{ name: "billing", secrets: [SECRET], mode: "async" }]);
    const app = makeApp({ endpoints, maxInFlight: 2, queueTimeoutMs: 5_000 });
    const bodies = Array.from({ length: 12 }, (_, i) =>
      eventBody(`evt_limit_group_${i}`, "invoice.paid", invoice({ id: `in_limit_group_${i}`, status: "paid", amount_paid: 2000 })),
    );
    const requests = await Promise.all(bodies.map((b) => signed(b)));
    const replies = await Promise.all(requests.map(async (r) => reply(await app.fetch(r))));
    expect(replies.map((r) => r.body.outcome)).toEqual(Array(12).fill("queued"));
    // Rows one statement inserted share its transaction id: with a slot per delivery no group could pass 2.
    const [largest] = await db<{ n: number }[]>`
      select max(n)::int as n from (select count(*) as n from webhook_inbox where event_id like 'evt_limit_group_%' group by xmin::text) as g
    `;
    expect(largest!.n).toBeGreaterThan(2);
    expect(await count(db, "webhook_inbox", "event_id like 'evt_limit_group_%' and processed_at is null")).toBe(12);
  });
});

describe("signature checks", () => {
  test("`createApp()` answers 400 signature_missing without a Stripe-Signature header", async () => {
    const res = await reply(await makeApp().fetch(post(fixture(CREATED), undefined)));
    expect(res.status).toBe(400);
    expect(res.body.error).toBe("signature_missing");
    await expectNothingWritten();
  });

  const body = fixture(CREATED);
  const malformed: [string, (sig: string) => string][] = [
    ["no t=", (sig) => `v1=${sig}`],
    ["two t= values", (sig) => `t=${NOW_SEC},t=${NOW_SEC - 1},v1=${sig}`],
    ["a non-integer t=", (sig) => `t=${NOW_SEC}.5,v1=${sig}`],
    ["a t= that is not a number", (sig) => `t=now,v1=${sig}`],
    ["no v1=", () => `t=${NOW_SEC}`],
    ["only a v0=", (sig) => `t=${NOW_SEC},v0=${sig}`],
    ["a space after the comma (Stripe sends none)", (sig) => `t=${NOW_SEC}, v1=${sig}`],
  ];
  test.each(malformed)("`createApp()` answers 400 signature_malformed for a header with %s", async (_label, make) => {
    const sig = v1Of(await signStripePayload(body, SECRET, NOW_SEC));
    const res = await reply(await makeApp().fetch(post(body, make(sig))));
    expect(res.status).toBe(400);
    expect(res.body.error).toBe("signature_malformed");
    await expectNothingWritten();
  });

  test("`createApp()` answers 400 signature_mismatch for a body signed with another secret", async () => {
    const res = await reply(await makeApp().fetch(await signed(body, { secret: OTHER_SECRET })));
    expect(res.status).toBe(400);
    expect(res.body.error).toBe("signature_mismatch");
    await expectNothingWritten();
  });

  test("`createApp()` answers 400 signature_mismatch for a re-serialized body", async () => {
    const original = fixture(CREATED);
    const reserialized = JSON.stringify(JSON.parse(original));
    expect(reserialized).not.toBe(original);
    const header = await signStripePayload(original, SECRET, NOW_SEC);
    const res = await reply(await makeApp().fetch(post(reserialized, header)));
    expect(res.status).toBe(400);
    expect(res.body.error).toBe("signature_mismatch");
    await expectNothingWritten();
    // The same header with the original bytes is accepted: the bytes, not the JSON, are signed.
    expect((await reply(await makeApp().fetch(post(original, header)))).body.outcome).toBe("processed");
  });

  test.each([
    ["301 s old", NOW_SEC - 301],
    ["301 s in the future", NOW_SEC + 301],
  ])("`createApp()` answers 400 timestamp_out_of_tolerance for a signature %s", async (_label, timestampSec) => {
    const res = await reply(await makeApp().fetch(await signed(body, { timestampSec })));
    expect(res.status).toBe(400);
    expect(res.body.error).toBe("timestamp_out_of_tolerance");
    await expectNothingWritten();
  });

  test.each([
    ["300 s old", NOW_SEC - 300],
    ["300 s in the future", NOW_SEC + 300],
  ])("`createApp()` accepts a signature exactly %s with the default tolerance", async (_label, timestampSec) => {
    const res = await reply(await makeApp().fetch(await signed(body, { timestampSec })));
    expect(res.status).toBe(200);
    expect(res.body.outcome).toBe("processed");
    expect(await count(db, "webhook_inbox")).toBe(1);
  });

  test("`createApp()` applies a custom toleranceSec in both directions", async () => {
    const app = makeApp({ toleranceSec: 10 });
    for (const t of [NOW_SEC - 11, NOW_SEC + 11]) {
      expect((await reply(await app.fetch(await signed(body, { timestampSec: t })))).body.error).toBe("timestamp_out_of_tolerance");
    }
    await expectNothingWritten();
    expect((await reply(await app.fetch(await signed(body, { timestampSec: NOW_SEC - 10 })))).body.outcome).toBe("processed");
  });
});

describe("secret rotation", () => {
  const rotating = () => makeApp({ endpoints: stripeEndpoints([{ name: "billing", secrets: [OTHER_SECRET, SECRET] }]) });

  test("`createApp()` accepts a request signed with either secret of an endpoint in rotation", async () => {
    const app = rotating();
    const a = await reply(await app.fetch(await signed(fixture(CREATED), { secret: SECRET })));
    const b = await reply(await app.fetch(await signed(fixture(PAID), { secret: OTHER_SECRET })));
    expect([a.status, a.body.outcome, b.status, b.body.outcome]).toEqual([200, "processed", 200, "processed"]);
    const c = await reply(await app.fetch(await signed(fixture(PLAN), { secret: THIRD_SECRET })));
    expect([c.status, c.body.error]).toEqual([400, "signature_mismatch"]);
    expect(await count(db, "webhook_inbox")).toBe(2);
  });

  test("`createApp()` accepts a header with two v1 signatures where only the second matches", async () => {
    const body = fixture(CREATED);
    const wrong = v1Of(await signStripePayload(body, OTHER_SECRET, NOW_SEC));
    const right = v1Of(await signStripePayload(body, SECRET, NOW_SEC));
    const app = makeApp();
    const onlyWrong = await reply(await app.fetch(post(body, `t=${NOW_SEC},v1=${wrong}`)));
    expect(onlyWrong.body.error).toBe("signature_mismatch");
    await expectNothingWritten();
    const res = await reply(await app.fetch(post(body, `t=${NOW_SEC},v1=${wrong},v1=${right}`)));
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ outcome: "processed", event_id: CREATED_ID });
    expect(await count(db, "webhook_inbox")).toBe(1);
  });
});

describe("body checks", () => {
  const notEvents: [string, string][] = [
    ["text that is not JSON", "this is not json"],
    ["a JSON object that is not an event", '{"hello":1}'],
    ["a JSON array", '[{"id":"evt_1","object":"event"}]'],
    ["an event without data.object", JSON.stringify({ id: "evt_nodata1", object: "event", type: "invoice.created", data: {} })],
    [
      "an event whose data.object is an array",
      JSON.stringify({ id: "evt_arraydata", object: "event", type: "invoice.created", data: { object: [1] } }),
    ],
    [
      "an event with a non-evt_ id",
      JSON.stringify({ id: "in_123", object: "event", type: "invoice.created", data: { object: invoice() } }),
    ],
    ["an empty body", ""],
  ];
  test.each(notEvents)("`createApp()` answers 400 invalid_event for signed %s", async (_label, body) => {
    const res = await reply(await makeApp().fetch(await signed(body)));
    expect(res.status).toBe(400);
    expect(res.body.error).toBe("invalid_event");
    await expectNothingWritten();
  });

  test.each(["sync", "async", "hybrid"] as const)(
    "`createApp()` stores a signed event holding \\u0000, which jsonb cannot store, from a copy with U+FFFD and keeps its raw body (%s)",
    async (mode) => {
      const body = eventBody(`evt_nul_char_${mode}`, "invoice.created", invoice({ description: "a\u0000b" }));
      expect(body).toContain("\\u0000");
      const endpoints = stripeEndpoints([{ name: "billing", secrets: [SECRET], mode }]);
      for (const expected of [mode === "async" ? "queued" : "processed", "duplicate"]) {
        const res = await reply(await makeApp({ endpoints }).fetch(await signed(body)));
        expect(res.status).toBe(200);
        expect(res.body.outcome).toBe(expected);
      }
      // The state row and its one payload row (sql/0027): the copy as payload, the exact bytes beside it.
      const rows = await db`
        select p.payload #>> '{data,object,description}' as description, p.raw_body, p.payload_sanitized, w.needs_review_at
          from webhook_inbox w
          join webhook_inbox_payloads p using (provider, endpoint, event_id, received_at)
      `;
      expect(await count(db, "webhook_inbox_payloads")).toBe(1);
      expect(rows).toEqual([
        { description: "a\ufffdb", raw_body: body, payload_sanitized: "\\u0000 ×1 → U+FFFD", needs_review_at: null },
      ] as never);
      expect(await tableCounts()).toEqual({ inbox: 1, invoices: mode === "async" ? 0 : 1, ledger: 0, outbox: 0 });
    },
  );

  test("`createApp()` answers 400 invalid_body for a body that is not UTF-8", async () => {
    const bytes = new Uint8Array([
      ...new TextEncoder().encode('{"id":"evt_x","note":"'),
      0xff,
      0xfe,
      0xc3,
      ...new TextEncoder().encode('"}'),
    ]);
    // Sign the lossy decoding: whatever a lenient reader would have verified must still be refused.
    const header = await signStripePayload(new TextDecoder().decode(bytes), SECRET, NOW_SEC);
    const res = await reply(await makeApp().fetch(post(bytes, header)));
    expect(res.status).toBe(400);
    expect(res.body.error).toBe("invalid_body");
    await expectNothingWritten();
  });
});

describe("body budget", () => {
  const SIZE = 64 * 1024;
  const LIMIT = 4 * SIZE + SIZE / 2;

  /** A body of `size` bytes whose stream is read only after `gate` opens, counting the bytes read. */
  function gatedBody(size: number, gate: Promise<void>) {
    const counter = { read: 0 };
    const stream = new ReadableStream<Uint8Array>(
      {
        async pull(controller) {
          await gate;
          if (counter.read >= size) return controller.close();
          const chunk = new Uint8Array(Math.min(16 * 1024, size - counter.read)).fill(0x61);
          counter.read += chunk.byteLength;
          controller.enqueue(chunk);
        },
      },
      { highWaterMark: 0 },
    );
    return { stream, counter };
  }

  test.each([
    ["a Content-Length", true],
    ["no Content-Length (streamed)", false],
  ] as const)(
    "`createApp()` answers 503 overloaded before reading a body that would pass the in-flight body budget (%s), then serves valid deliveries",
    async (_label, declared) => {
      const budget = createBodyBudget(LIMIT);
      const app = makeApp({ bodyBudget: budget });
      let open!: () => void;
      const gate = new Promise<void>((resolve) => (open = resolve));
      const header = `t=${NOW_SEC},v1=${"0".repeat(64)}`;
      const bodies = Array.from({ length: 12 }, () => gatedBody(SIZE, gate));
      const pending = bodies.map(({ stream }) =>
        app.fetch(post(stream, header, URL_DEFAULT, declared ? { "content-length": String(SIZE) } : {})),
      );
      // Declared bodies: four fit and hold the budget while the gate is shut; the other eight are refused meanwhile.
      if (declared) await waitUntil("four bodies holding the budget", async () => budget.inUse === 4 * SIZE);
      open();
      const replies = await Promise.all(
        pending.map(async (p) => ({ ...(await reply(await p)), retryAfter: (await p).headers.get("retry-after") })),
      );
      const refused = replies.filter((r) => r.status === 503);
      expect(refused.length).toBeGreaterThan(0);
      for (const r of refused) expect([r.body.error, r.retryAfter]).toEqual(["overloaded", expect.any(String)]);
      expect(replies.filter((r) => r.status !== 503).map((r) => r.body.error)).toEqual(
        Array(12 - refused.length).fill("signature_mismatch"),
      );
      // Never more body bytes held than the budget; a declared body refused is never read at all.
      expect(budget.peak).toBeLessThanOrEqual(LIMIT);
      expect(budget.peak).toBeGreaterThanOrEqual(4 * SIZE);
      if (declared) expect(bodies.filter((b) => b.counter.read === 0)).toHaveLength(refused.length);
      expect(budget.inUse).toBe(0);
      await expectNothingWritten();
      const res = await reply(await app.fetch(await signed(fixture(CREATED))));
      expect([res.status, res.body.outcome]).toEqual([200, "processed"]);
      expect(budget.inUse).toBe(0);
    },
  );
});

describe("body size", () => {
  const MAX = 2048;
  const big = fixture(CREATED);

  test("`createApp()` answers 413 payload_too_large for a body over maxBodyBytes with a Content-Length", async () => {
    const bytes = new TextEncoder().encode(big).byteLength;
    expect(bytes).toBeGreaterThan(MAX);
    const header = await signStripePayload(big, SECRET, NOW_SEC);
    const res = await reply(
      await makeApp({ maxBodyBytes: MAX }).fetch(post(big, header, URL_DEFAULT, { "content-length": String(bytes) })),
    );
    expect(res.status).toBe(413);
    expect(res.body.error).toBe("payload_too_large");
    await expectNothingWritten();
  });

  test("`createApp()` answers 413 payload_too_large for a streamed body over maxBodyBytes without a Content-Length", async () => {
    const header = await signStripePayload(big, SECRET, NOW_SEC);
    const request = post(streamOf(big, 1000), header);
    expect(request.headers.get("content-length")).toBeNull();
    const res = await reply(await makeApp({ maxBodyBytes: MAX }).fetch(request));
    expect(res.status).toBe(413);
    expect(res.body.error).toBe("payload_too_large");
    await expectNothingWritten();
  });

  test("`createApp()` accepts a streamed body of exactly maxBodyBytes and refuses one byte more", async () => {
    const sized = (bytes: number, id: string): string => {
      const base = eventBody(id, "plan.created", { id: "plan_size", object: "plan", nickname: "" });
      return eventBody(id, "plan.created", {
        id: "plan_size",
        object: "plan",
        nickname: "x".repeat(bytes - new TextEncoder().encode(base).byteLength),
      });
    };
    const exact = sized(MAX, "evt_size_exact");
    const over = sized(MAX + 1, "evt_size_over1");
    expect(new TextEncoder().encode(exact).byteLength).toBe(MAX);
    const app = makeApp({ maxBodyBytes: MAX });
    const ok = await reply(await app.fetch(post(streamOf(exact, 500), await signStripePayload(exact, SECRET, NOW_SEC))));
    expect([ok.status, ok.body.outcome]).toEqual([200, "ignored"]);
    const tooBig = await reply(await app.fetch(post(streamOf(over, 500), await signStripePayload(over, SECRET, NOW_SEC))));
    expect([tooBig.status, tooBig.body.error]).toEqual([413, "payload_too_large"]);
    expect(await count(db, "webhook_inbox")).toBe(1);
  });
});

describe("routing", () => {
  test("`createApp()` answers 405 with Allow: POST to GET /webhooks/stripe", async () => {
    const res = await makeApp().fetch(new Request(URL_DEFAULT));
    expect(res.status).toBe(405);
    expect(res.headers.get("allow")).toBe("POST");
    expect(((await res.json()) as Reply).error).toBe("method_not_allowed");
  });

  test("`createApp()` answers HEAD /healthz and HEAD /metrics (its `allow` header names HEAD) with 200 and no body", async () => {
    for (const path of ["/healthz", "/metrics"]) {
      const res = await makeApp().fetch(new Request(`${BASE}${path}`, { method: "HEAD" }));
      expect({ path, status: res.status, body: await res.text() }).toEqual({ path, status: 200, body: "" });
    }
  });

  test("`createApp()` answers 404 unknown_endpoint for a signed event to /webhooks/stripe/nope", async () => {
    const res = await reply(await makeApp().fetch(await signed(fixture(CREATED), { url: `${URL_DEFAULT}/nope` })));
    expect(res.status).toBe(404);
    expect(res.body.error).toBe("unknown_endpoint");
    await expectNothingWritten();
  });

  test("`createApp()` answers 404 unknown_endpoint for a provider it does not serve", async () => {
    const res = await reply(await makeApp().fetch(await signed(fixture(CREATED), { url: `${BASE}/webhooks/github` })));
    expect([res.status, res.body.error]).toEqual([404, "unknown_endpoint"]);
    await expectNothingWritten();
  });

  test("`createApp()` answers 404, not 405, to a signed POST on a path below an endpoint", async () => {
    // A POST is the allowed method here: 405 with `Allow: POST` would tell the sender to do what it did.
    const res = await makeApp().fetch(await signed(fixture(CREATED), { url: `${URL_DEFAULT}/billing/extra` }));
    expect(res.status).toBe(404);
    expect(["unknown_endpoint", "not_found"]).toContain(((await res.json()) as Reply).error ?? "");
    await expectNothingWritten();
  });

  test.each(["GET", "POST"])("`createApp()` answers 404 not_found to %s on an unknown route", async (method) => {
    const res = await reply(await makeApp().fetch(new Request(`${BASE}/nope`, { method, ...(method === "POST" ? { body: "{}" } : {}) })));
    expect(res.status).toBe(404);
    expect(res.body.error).toBe("not_found");
  });

  test("`createApp()` serves the default endpoint at /webhooks/stripe and /webhooks/stripe/billing", async () => {
    const app = makeApp();
    const a = await reply(await app.fetch(await signed(fixture(CREATED), { url: `${URL_DEFAULT}/billing` })));
    const b = await reply(await app.fetch(await signed(fixture(CREATED), { url: URL_DEFAULT })));
    expect([a.body.outcome, b.body.outcome]).toEqual(["processed", "duplicate"]);
    const rows = await db`select endpoint from webhook_inbox`;
    expect([...rows]).toEqual([{ endpoint: "billing" }]);
  });

  test("`createApp()` keeps endpoints apart: one event to billing and analytics is two rows, each verified with its own secret", async () => {
    const app = makeApp({
      endpoints: stripeEndpoints([
        { name: "billing", secrets: [SECRET] },
        { name: "analytics", secrets: [OTHER_SECRET] },
      ]),
    });
    const body = fixture(PAID);
    const crossed1 = await reply(await app.fetch(await signed(body, { url: `${URL_DEFAULT}/billing`, secret: OTHER_SECRET })));
    const crossed2 = await reply(await app.fetch(await signed(body, { url: `${URL_DEFAULT}/analytics`, secret: SECRET })));
    expect([crossed1.status, crossed1.body.error, crossed2.status, crossed2.body.error]).toEqual([
      400,
      "signature_mismatch",
      400,
      "signature_mismatch",
    ]);
    await expectNothingWritten();
    const billing = await reply(await app.fetch(await signed(body, { url: URL_DEFAULT, secret: SECRET })));
    const analytics = await reply(await app.fetch(await signed(body, { url: `${URL_DEFAULT}/analytics`, secret: OTHER_SECRET })));
    expect([billing.body.outcome, analytics.body.outcome]).toEqual(["processed", "processed"]);
    const rows = await db`select endpoint, event_id from webhook_inbox order by endpoint`;
    expect([...rows]).toEqual([
      { endpoint: "analytics", event_id: "evt_1SkB1cLgUG5tbmjc0paidxx" },
      { endpoint: "billing", event_id: "evt_1SkB1cLgUG5tbmjc0paidxx" },
    ]);
    // One business fact: the payment is booked once although both endpoints processed the event.
    expect(await count(db, "ledger_entries")).toBe(1);
  });
});

describe("failures", () => {
  test("`createApp()` answers 500 processing_failed when a handler throws, keeps nothing, and processes the redelivery", async () => {
    const created = billingHandlers["invoice.created"];
    if (!created) throw new Error("billing has no invoice.created handler");
    let failing = true;
    const handlers: HandlerTable = {
      ...billingHandlers,
      "invoice.created": async (tx, object, context) => {
        await created(tx, object, context);
        if (failing) throw new Error("simulated handler failure after the invoice insert");
      },
    };
    const endpoint: Endpoint = { name: "billing", provider: stripeProvider, secrets: [SECRET], handlers, isDefault: true };
    const app = makeApp({ endpoints: [endpoint] });
    const res = await reply(await app.fetch(await signed(fixture(CREATED))));
    expect(res.status).toBe(500);
    expect(res.body.error).toBe("processing_failed");
    expect(res.text).not.toContain("simulated");
    await expectNothingWritten();

    failing = false;
    const retry = await reply(await app.fetch(await signed(fixture(CREATED))));
    expect([retry.status, retry.body.outcome]).toEqual([200, "processed"]);
    expect(await tableCounts()).toEqual({ inbox: 1, invoices: 1, ledger: 0, outbox: 0 });
  });

  test("`createApp()` parks a signed event its handler can never apply as needs-review and answers 200 needs_review, not a 5xx loop", async () => {
    const body = eventBody("evt_no_customer_1", "invoice.paid", invoice({ customer: null, amount_paid: 2000, status: "paid" }));
    for (let delivery = 0; delivery < 2; delivery++) {
      const res = await reply(await makeApp().fetch(await signed(body)));
      expect(res.status).toBe(200);
      expect(res.body.outcome).toBe(delivery === 0 ? "needs_review" : "duplicate");
    }
    const rows = await db`select attempts, processed_at, needs_review_at is not null as parked, last_error from webhook_inbox`;
    expect(rows).toHaveLength(1);
    expect(rows[0]).toMatchObject({ attempts: 1, processed_at: null, parked: true });
    expect(String(rows[0]?.last_error)).toContain("customer");
    expect(await tableCounts()).toEqual({ inbox: 1, invoices: 0, ledger: 0, outbox: 0 });
  });

  test.each(["sync", "async"] as const)(
    "`createApp()` parks a payment event whose invoice has no status instead of acknowledging it with nothing booked (%s)",
    async (mode) => {
      const object = invoice({ id: "in_no_status", amount_paid: 5000 });
      delete object.status;
      const body = eventBody(`evt_no_status_${mode}`, "invoice.paid", object);
      const endpoints = stripeEndpoints([{ name: "billing", secrets: [SECRET], mode }]);
      const res = await reply(await makeApp({ endpoints }).fetch(await signed(body)));
      expect(res.status).toBe(200);
      expect(res.body.outcome).toBe(mode === "sync" ? "needs_review" : "queued");
      if (mode === "async") {
        // The worker must park it too: a status-less payment is never "processed with nothing booked".
        const [result] = await workOff(db, billingHandlers);
        expect(result?.outcome).toBe("needs_review");
      }
      const [row] = await db`select processed_at, needs_review_at is not null as parked, last_error from webhook_inbox`;
      expect(row).toMatchObject({ processed_at: null, parked: true });
      expect(String(row?.last_error)).toContain("status");
      expect(await tableCounts()).toEqual({ inbox: 1, invoices: 0, ledger: 0, outbox: 0 });
    },
  );

  test("`createApp()` parks a payment for a void invoice as needs-review: not booked, not acknowledged as processed", async () => {
    const app = makeApp();
    const voided = eventBody("evt_void_first", "invoice.voided", invoice({ id: "in_void_paid", status: "void" }));
    expect((await reply(await app.fetch(await signed(voided)))).body.outcome).toBe("processed");
    const paid = eventBody("evt_paid_after_void", "invoice.paid", invoice({ id: "in_void_paid", status: "paid", amount_paid: 2000 }));
    const res = await reply(await app.fetch(await signed(paid)));
    expect(res.status).toBe(200);
    expect(res.body.outcome).toBe("needs_review");
    const [row] =
      await db`select needs_review_at is not null as parked, last_error from webhook_inbox where event_id = 'evt_paid_after_void'`;
    expect(row?.parked).toBe(true);
    expect(String(row?.last_error)).toContain("void invoice");
    expect(await count(db, "ledger_entries")).toBe(0);
    expect(await count(db, "outbox")).toBe(0);
  });

  test.each(["sync", "async"] as const)(
    "`createApp()` parks a second payment of another amount than the one booked as needs-review, naming why (%s)",
    async (mode) => {
      const app = makeApp({ endpoints: stripeEndpoints([{ name: "billing", secrets: [SECRET], mode }]) });
      // The invoice as an earlier payment of 2000 left it.
      await db`insert into invoices (id, customer_id, status, currency, amount_due, amount_paid, paid_at) values ('in_amount_app', 'cus_test_1', 'paid', 'usd', 2500, 2000, now())`;
      const second = eventBody(
        "evt_amount_second",
        "invoice.payment_succeeded",
        invoice({ id: "in_amount_app", status: "paid", amount_due: 2500, amount_paid: 2500 }),
      );
      expect((await reply(await app.fetch(await signed(second)))).body.outcome).toBe(mode === "sync" ? "needs_review" : "queued");
      if (mode === "async") {
        const [result] = await workOff(db, billingHandlers);
        expect(result?.outcome).toBe("needs_review");
      }
      const [row] =
        await db`select needs_review_at is not null as parked, processed_at, last_error from webhook_inbox where event_id = 'evt_amount_second'`;
      expect(row).toMatchObject({ parked: true, processed_at: null });
      expect(String(row?.last_error)).toContain("amount_paid differs from the amount already booked");
      expect(await db`select amount_paid::int from invoices`).toEqual([{ amount_paid: 2000 }] as never);
    },
  );

  test("`createApp()` gives up on a sync delivery stuck behind a row lock after statementTimeoutMs, keeps nothing, and processes the redelivery", async () => {
    const body = eventBody("evt_locked_1", "invoice.paid", invoice({ id: "in_locked_1", status: "paid", amount_paid: 2000 }));
    await db`insert into invoices (id, customer_id, status, currency) values ('in_locked_1', 'cus_test_1', 'open', 'usd')`;
    const holder = connect(fresh.url, { max: 1 });
    try {
      let release!: () => void;
      const held = holder.begin(async (tx) => {
        await tx`select 1 from invoices where id = 'in_locked_1' for update`;
        await new Promise<void>((r) => (release = r));
      });
      while (!release) await Bun.sleep(5);
      const stuck = await reply(await makeApp({ statementTimeoutMs: 300 }).fetch(await signed(body)));
      expect(stuck.status).toBe(500);
      expect(stuck.body.error).toBe("processing_failed");
      expect(await count(db, "webhook_inbox")).toBe(0);
      release();
      await held;
      const retried = await reply(await makeApp({ statementTimeoutMs: 300 }).fetch(await signed(body)));
      expect(retried.body.outcome).toBe("processed");
      expect(await count(db, "ledger_entries")).toBe(1);
    } finally {
      await holder.end({ timeout: 1 });
    }
  });

  test("`createApp()` answers 503 database_unavailable with Retry-After when the database is unreachable, and /readyz follows the database", async () => {
    const dead = connect("postgres://postgres:postgres@127.0.0.1:1/x", { connectTimeoutSec: 1 });
    try {
      const app = makeApp({ db: dead });
      const res = await app.fetch(await signed(fixture(CREATED)));
      expect(res.status).toBe(503);
      expect(((await res.json()) as Reply).error).toBe("database_unavailable");
      expect(Number(res.headers.get("retry-after"))).toBeGreaterThan(0);

      // Liveness stays 200 (a database outage must not get the receiver restarted); readiness is 503.
      expect((await app.fetch(new Request(`${BASE}/healthz`))).status).toBe(200);
      const ready = await app.fetch(new Request(`${BASE}/readyz`));
      expect(ready.status).toBe(503);
      expect(((await ready.json()) as Reply).error).toBe("database_unavailable");
      expect(Number(ready.headers.get("retry-after"))).toBeGreaterThan(0);
    } finally {
      await dead.end({ timeout: 1 });
    }
    const ready = await makeApp({ schemaVersion: 1 }).fetch(new Request(`${BASE}/readyz`));
    expect(ready.status).toBe(200);
    expect(((await ready.json()) as Reply).status).toBe("ready");
    const pending = await makeApp({ schemaVersion: 999 }).fetch(new Request(`${BASE}/readyz`));
    expect(pending.status).toBe(503);
    expect(((await pending.json()) as Reply).status).toBe("migrations_pending");
  });
});

describe("no leaks", () => {
  test("`createApp()` responses never contain the secret, the signature header or the payload", async () => {
    const app = makeApp();
    const body = fixture(PAID);
    const customer = "cus_TfA1pQ2w3e4r5t";
    expect(body).toContain(customer);

    const cases: { request: Request; header: string; body: string; status: number }[] = [];
    const wrong = await signed(body, { secret: OTHER_SECRET });
    cases.push({ request: wrong, header: wrong.headers.get("stripe-signature") ?? "", body, status: 400 });
    const secretish = JSON.stringify({ hello: "payload-marker-7f3a", secret: SECRET });
    const notEvent = await signed(secretish);
    cases.push({ request: notEvent, header: notEvent.headers.get("stripe-signature") ?? "", body: secretish, status: 400 });
    const ok = await signed(body);
    cases.push({ request: ok, header: ok.headers.get("stripe-signature") ?? "", body, status: 200 });

    for (const c of cases) {
      const res = await reply(await app.fetch(c.request));
      expect(res.status).toBe(c.status);
      for (const forbidden of [SECRET, OTHER_SECRET, c.header, v1Of(c.header), c.body, customer, "payload-marker-7f3a"]) {
        expect(res.text).not.toContain(forbidden);
      }
    }
  });
});

describe("the fixture lifecycle", () => {
  /** Every fixture 3 times, shuffled by `seed`. */
  function plan(seed: number): { name: string; body: string }[] {
    const queue = lifecycle().flatMap((e) => [e, e, e]);
    shuffleInPlace(queue, mulberry32(seed));
    return queue;
  }

  test("three shuffle seeds give three different delivery orders", () => {
    const orders = [11, 42, 2024].map((s) =>
      plan(s)
        .map((e) => e.name)
        .join("|"),
    );
    expect(new Set(orders).size).toBe(3);
  });

  test.each([11, 42, 2024])(
    "`createApp()` reaches the same end state for the lifecycle shuffled with seed %d, 3 copies, 8 in flight",
    async (seed) => {
      const app = makeApp();
      const queue = plan(seed);
      expect(queue).toHaveLength(36);
      const results: { status: number; outcome: string | undefined }[] = [];
      let next = 0;
      await Promise.all(
        Array.from({ length: 8 }, async () => {
          while (next < queue.length) {
            const event = queue[next++];
            if (!event) break;
            const res = await reply(await app.fetch(await signed(event.body)));
            results.push({ status: res.status, outcome: res.body.outcome ?? res.body.error });
          }
        }),
      );

      expect(results.filter((r) => r.status !== 200)).toEqual([]);
      const outcomes: Record<string, number> = {};
      for (const r of results) outcomes[String(r.outcome)] = (outcomes[String(r.outcome)] ?? 0) + 1;
      expect(outcomes).toEqual({ processed: 11, ignored: 1, duplicate: 24 });

      const invoices = await db`select id, status, amount_paid::int as amount_paid from invoices order by id`;
      expect([...invoices]).toEqual([
        { id: "in_1SkA1pLgUG5tbmjcQ7nB2vXa", status: "paid", amount_paid: 2000 },
        { id: "in_1SkA2qLgUG5tbmjcR8oC3wYb", status: "void", amount_paid: 0 },
        { id: "in_1SkA3rLgUG5tbmjcS9pD4xZc", status: "paid", amount_paid: 129900 },
      ]);
      const ledger = await db`select invoice_id, kind, amount::int as amount, currency from ledger_entries order by amount`;
      expect([...ledger]).toEqual([
        { invoice_id: "in_1SkA1pLgUG5tbmjcQ7nB2vXa", kind: "payment", amount: 2000, currency: "usd" },
        { invoice_id: "in_1SkA3rLgUG5tbmjcS9pD4xZc", kind: "payment", amount: 129900, currency: "usd" },
      ]);
      const outbox = await db`select aggregate_id, event_type, (payload->>'amount')::int as amount from outbox order by aggregate_id`;
      expect([...outbox]).toEqual([
        { aggregate_id: "in_1SkA1pLgUG5tbmjcQ7nB2vXa", event_type: "InvoicePaymentBooked", amount: 2000 },
        { aggregate_id: "in_1SkA3rLgUG5tbmjcS9pD4xZc", event_type: "InvoicePaymentBooked", amount: 129900 },
      ]);
      const inbox = await db`select outcome, count(*)::int as n from webhook_inbox group by outcome order by outcome`;
      expect([...inbox]).toEqual([
        { outcome: "ignored", n: 1 },
        { outcome: "processed", n: 11 },
      ]);
      const ids = (await db`select event_id from webhook_inbox order by event_id`).map((r) => r.event_id as string);
      expect(ids).toEqual(
        lifecycle()
          .map((e) => (JSON.parse(e.body) as { id: string }).id)
          .sort(),
      );
    },
  );
});

describe("logging", () => {
  test("`createApp()` logs one line per webhook request with endpoint, event, outcome, status and duration, and no secret or payload", async () => {
    const lines: Record<string, unknown>[] = [];
    const app = makeApp({}, lines);
    const body = fixture(PAID);
    const requests = [
      await signed(body),
      await signed(body),
      await signed(body, { secret: OTHER_SECRET }),
      await signed(body, { url: `${URL_DEFAULT}/nope` }),
    ];
    const headers = requests.map((r) => r.headers.get("stripe-signature") ?? "");
    for (const r of requests) await app.fetch(r);

    expect(lines).toHaveLength(4);
    const [processed, duplicate, mismatch, unknown] = lines;
    const common = { endpoint: "billing", event_id: "evt_1SkB1cLgUG5tbmjc0paidxx", type: "invoice.paid" };
    expect(processed).toMatchObject({ ...common, outcome: "processed", status: 200 });
    expect(duplicate).toMatchObject({ ...common, outcome: "duplicate", status: 200 });
    expect(mismatch).toMatchObject({ endpoint: "billing", outcome: "rejected", error: "signature_mismatch", status: 400 });
    expect(unknown).toMatchObject({ endpoint: "nope", outcome: "rejected", error: "unknown_endpoint", status: 404 });
    for (const line of lines) {
      expect(typeof line.duration_ms).toBe("number");
      expect(line.duration_ms as number).toBeGreaterThanOrEqual(0);
    }
    const text = JSON.stringify(lines);
    for (const forbidden of [SECRET, OTHER_SECRET, body, "cus_TfA1pQ2w3e4r5t", ...headers, ...headers.map(v1Of)]) {
      expect(text).not.toContain(forbidden);
    }
  });
});
