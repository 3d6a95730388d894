// The fake Stripe API, driven through the real stripe-node client (no network beyond loopback).
import { afterAll, beforeAll, expect, test } from "bun:test";
import type Stripe from "stripe";
import { startFakeStripe, type RunningFakeStripe } from "../../src/dev/fake-stripe/serve.ts";
import { FakeStripeStore } from "../../src/dev/fake-stripe/store.ts";
import { V2_EVENTS } from "../../src/dev/fake-stripe/app.ts";
import { stripeApiClient } from "../../src/stripe-api/client.ts";
import { withStripeRetry } from "../../src/stripe-api/retry.ts";

const KEY = "sk_test_fakefakefake123";
let fake: RunningFakeStripe;
let stripe: Stripe;

beforeAll(() => {
  const store = new FakeStripeStore(KEY);
  // 25 events over 10 seconds, several in the same second; every third one undelivered.
  for (let i = 0; i < 25; i++) {
    store.putEvent(
      {
        id: `evt_${String(i).padStart(3, "0")}`,
        object: "event",
        created: 1_700_000_000 + Math.floor(i / 3),
        type: i % 2 ? "invoice.paid" : "invoice.created",
      },
      i % 3 !== 0,
    );
  }
  store.put("invoices", { id: "in_1", object: "invoice", created: 1_700_000_000, status: "paid" });
  fake = startFakeStripe({ store });
  stripe = stripeApiClient({ apiKey: KEY, apiBase: new URL(fake.url) });
});
afterAll(() => fake.stop());

test("`events.list` auto-pagination goes newest first with starting_after, same-second events in reverse insertion order", async () => {
  const seen: string[] = [];
  for await (const e of stripe.events.list({ limit: 4 })) seen.push(e.id);
  expect(seen).toEqual(Array.from({ length: 25 }, (_, i) => `evt_${String(24 - i).padStart(3, "0")}`));
  const pages = fake.store.requests.filter((r) => r.path === "/v1/events");
  expect(pages.length).toBe(7);
  expect(pages[1]!.query.starting_after).toBe("evt_021");
});

test("`events.list` with ending_before pages toward newer events, so auto-pagination runs oldest first", async () => {
  const seen: string[] = [];
  for await (const e of stripe.events.list({ limit: 5, ending_before: "evt_003" })) seen.push(e.id);
  expect(seen).toEqual(Array.from({ length: 21 }, (_, i) => `evt_${String(i + 4).padStart(3, "0")}`));
});

test("`events.list` filters by created range, types and delivery_success", async () => {
  const page = await stripe.events.list({ created: { gte: 1_700_000_002, lt: 1_700_000_004 }, types: ["invoice.paid"], limit: 100 });
  expect(page.data.map((e) => e.id).sort()).toEqual(["evt_007", "evt_009", "evt_011"]);
  expect(page.has_more).toBe(false);
  const undelivered = await stripe.events.list({ delivery_success: false, limit: 100 });
  expect(undelivered.data.length).toBe(9);
  const wildcard = await stripe.events.list({ type: "invoice.*", limit: 3 });
  expect(wildcard.data.length).toBe(3);
  expect(wildcard.has_more).toBe(true);
});

test("the fake answers 404 resource_missing, 401 on a wrong key and 400 on a bad limit, as stripe-node errors", async () => {
  expect((await stripe.invoices.retrieve("in_1")).status).toBe("paid");
  expect(stripe.invoices.retrieve("in_missing")).rejects.toMatchObject({ statusCode: 404, code: "resource_missing" });
  const wrong = stripeApiClient({ apiKey: "sk_test_wrongwrongwrong", apiBase: new URL(fake.url) });
  expect(wrong.invoices.retrieve("in_1")).rejects.toMatchObject({ statusCode: 401 });
  expect(stripe.events.list({ limit: 101 })).rejects.toMatchObject({ statusCode: 400, param: "limit" });
});

test("`withStripeRetry()` retries injected 429s and 500s and returns the page; a 404 is final at once", async () => {
  fake.store.failNext(2, 429, /^\/v1\/invoices/);
  fake.store.failNext(1, 500, /^\/v1\/invoices/);
  const retries: string[] = [];
  const list = await withStripeRetry(() => stripe.invoices.list({ limit: 10 }), {
    sleep: async () => {},
    onRetry: (_a, _w, r) => retries.push(r),
  });
  expect(list.data.map((i) => i.id)).toEqual(["in_1"]);
  expect(retries).toEqual(["HTTP 429", "HTTP 429", "HTTP 500"]);
  let calls = 0;
  const missing = withStripeRetry(
    () => {
      calls++;
      return stripe.invoices.retrieve("in_missing");
    },
    { sleep: async () => {} },
  );
  expect(missing).rejects.toMatchObject({ statusCode: 404 });
  await missing.catch(() => {});
  expect(calls).toBe(1);
});

test("`withStripeRetry()` gives up after its attempts and throws the last 429", async () => {
  fake.store.failNext(3, 429, /^\/v1\/events/);
  expect(withStripeRetry(() => stripe.events.list(), { attempts: 3, sleep: async () => {} })).rejects.toMatchObject({ statusCode: 429 });
});

test("a thin notification's `fetchEvent()` reads GET /v2/core/events/<id> and `fetchRelatedObject()` its related_object.url from the fake", async () => {
  fake.store.put(V2_EVENTS, {
    id: "evt_test_v2fake",
    object: "v2.core.event",
    type: "v1.invoice.paid",
    created: 1_700_000_000,
    livemode: false,
  });
  const notification = stripe.parseEventNotificationWithoutVerification(
    JSON.stringify({
      id: "evt_test_v2fake",
      object: "v2.core.event",
      type: "v1.invoice.paid",
      created: "2023-11-14T22:13:20.000Z",
      livemode: false,
      related_object: { id: "in_1", type: "invoice", url: "/v1/invoices/in_1" },
    }),
  ) as Stripe.Events.V1InvoicePaidEventNotification;
  expect((await notification.fetchEvent()).id).toBe("evt_test_v2fake");
  expect((await notification.fetchRelatedObject()).status).toBe("paid");
  expect(fake.store.requests.slice(-2).map((r) => [r.path, r.status])).toEqual([
    ["/v2/core/events/evt_test_v2fake", 200],
    ["/v1/invoices/in_1", 200],
  ]);
  const missing = stripe.parseEventNotificationWithoutVerification(
    JSON.stringify({
      id: "evt_test_v2none",
      object: "v2.core.event",
      type: "v1.invoice.paid",
      created: "2023-11-14T22:13:20.000Z",
      livemode: false,
    }),
  );
  expect(missing.fetchEvent()).rejects.toMatchObject({ statusCode: 404, code: "resource_missing" });
});

test("`bun run fake-stripe` serves the fixture events and their objects to stripe-node until stopped", async () => {
  const child = Bun.spawn([process.execPath, "src/dev/bin/fake-stripe.ts", "--port", "0", "--key", KEY], {
    stdout: "pipe",
    stderr: "pipe",
  });
  try {
    const reader = child.stdout.getReader();
    let text = "";
    while (!text.includes("\n")) {
      const { value, done } = await reader.read();
      if (done) break;
      text += new TextDecoder().decode(value);
    }
    reader.releaseLock();
    const url = /on (http:\/\/127\.0\.0\.1:\d+)/.exec(text)?.[1];
    expect(url).toBeDefined();
    expect(text).not.toContain(KEY);
    const client = stripeApiClient({ apiKey: KEY, apiBase: new URL(url!) });
    const events: string[] = [];
    for await (const e of client.events.list({ limit: 100, delivery_success: false })) events.push(e.id);
    expect(events.length).toBeGreaterThan(20);
    expect((await client.invoices.list({ limit: 100 })).data.length).toBeGreaterThan(0);
    expect((await client.refunds.list({ limit: 100 })).data.length).toBeGreaterThan(0);
  } finally {
    child.kill("SIGTERM");
    expect(await child.exited).toBe(0);
  }
});
