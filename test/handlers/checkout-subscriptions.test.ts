// Checkout fulfilment, subscriptions and dunning through the public seams: signed requests to createApp
// in sync, async (the worker) and hybrid mode, the fixtures shuffled, twice, concurrently, ending in each
// set's README state; and a same-second tie of subscription states ended by refetching the subscription
// from the fake Stripe API.
import { afterAll, beforeEach, describe, expect, test } from "bun:test";
import { startFakeStripe } from "../../src/dev/fake-stripe/serve.ts";
import { applyCheckoutSession } from "../../src/handlers/checkout.ts";
import { stripeHandlers } from "../../src/handlers/stripe-money.ts";
import { receiveSync, type Mode, type ReceiveTarget } from "../../src/receiver/receive.ts";
import { stripeApiClient } from "../../src/stripe-api/client.ts";
import { stripeFetcher, type Fetcher } from "../../src/worker/stripe-fetch.ts";
import {
  accessMessages,
  CHECKOUT_END_STATE,
  checkoutEvents,
  checkoutState,
  SUB_A,
  SUB_B,
  SUBSCRIPTION_END_STATE,
  subscriptionEvents,
  subscriptionState,
  truncateCheckoutSubscriptions,
} from "../support/checkout-subscriptions.ts";
import { count, freshDatabase, inboxRowsOf, verified } from "../support/helpers.ts";
import { deliverAll, drainWithWorkers as drain, shuffledTwice } from "../support/delivery.ts";

const fresh = await freshDatabase();
const db = fresh.db;
afterAll(() => fresh.drop());
beforeEach(() => truncateCheckoutSubscriptions(db));

const TARGET: ReceiveTarget = { provider: "stripe", endpoint: "billing", handlers: stripeHandlers };
const WAITS = 60_000;

const deliver = (mode: Mode, bodies: string[]) => deliverAll(db, mode, bodies);

/** Runs two workers until no row is left to process; none may end parked. */
async function drainWithWorkers(fetcher?: Fetcher): Promise<void> {
  await drain(db, fresh.url, { stripe: stripeHandlers }, fetcher);
  const [parked] = await db<{ n: number }[]>`select count(*)::int as n from webhook_inbox where needs_review_at is not null`;
  expect(parked?.n).toBe(0);
}

/** Both fixture sets together, shuffled twice by `seed`: checkout and subscription events interleaved. */
const both = (seed: number) => shuffledTwice([...checkoutEvents(), ...subscriptionEvents()], seed);

async function expectReadmeStates(): Promise<void> {
  expect(await checkoutState(db)).toEqual(CHECKOUT_END_STATE);
  expect(await subscriptionState(db)).toEqual(SUBSCRIPTION_END_STATE);
}

describe("Checkout fulfilment, subscriptions and dunning", () => {
  test(
    "`createApp()` in sync mode ends in the READMEs' states for both sets shuffled, twice, concurrently",
    async () => {
      const outcomes = await deliver("sync", both(1));
      expect(new Set(outcomes)).toEqual(new Set(["processed", "duplicate"]));
      await expectReadmeStates();
    },
    WAITS,
  );

  test(
    "`createApp()` in async mode with two `runWorker()`s ends in the READMEs' states for both sets shuffled, twice, concurrently",
    async () => {
      const outcomes = await deliver("async", both(2));
      expect(new Set(outcomes)).toEqual(new Set(["queued", "duplicate"]));
      await drainWithWorkers();
      await expectReadmeStates();
    },
    WAITS,
  );

  test(
    "`createApp()` in hybrid mode (and the worker for any fallback) ends in the READMEs' states for both sets shuffled, twice, concurrently",
    async () => {
      const outcomes = await deliver("hybrid", both(3));
      expect(outcomes.every((o) => ["processed", "duplicate", "queued"].includes(o))).toBe(true);
      await drainWithWorkers();
      await expectReadmeStates();
    },
    WAITS,
  );

  test("`receiveSync()` of the subscription set in Stripe's order announces each access change once: A started, ended; B started, ended (paused), started (resumed)", async () => {
    for (const e of subscriptionEvents()) await receiveSync(db, TARGET, verified(e.body));
    for (const e of subscriptionEvents()) expect(await receiveSync(db, TARGET, verified(e.body))).toBe("duplicate");
    expect(await accessMessages(db)).toEqual({
      [SUB_A]: ["SubscriptionAccessStarted", "SubscriptionAccessEnded"],
      [SUB_B]: ["SubscriptionAccessStarted", "SubscriptionAccessEnded", "SubscriptionAccessStarted"],
    });
    expect(await subscriptionState(db)).toEqual(SUBSCRIPTION_END_STATE);
  });

  test("a subscription event delivered again under another `created` (a source dating one event twice) is a duplicate of its one inbox row: answered duplicate, nothing changed", async () => {
    for (const e of subscriptionEvents()) await receiveSync(db, TARGET, verified(e.body));
    const first = JSON.parse(subscriptionEvents()[0]!.body) as { id: string; created: number };
    const inboxOf = () => inboxRowsOf(db, first.id);
    const before = { inbox: await inboxOf(), outbox: await count(db, "outbox") };
    expect(before.inbox).toHaveLength(1);
    expect(before.inbox[0]).toMatchObject({ outcome: "processed", payload_dropped: false });
    const redated = JSON.stringify({ ...first, created: first.created + 1 }, null, 2);
    // The key is (provider, endpoint, event_id) (sql/0027): the creation time is data, not part of it.
    expect(await receiveSync(db, TARGET, verified(redated))).toBe("duplicate");
    expect(await inboxOf()).toEqual(before.inbox);
    expect(await count(db, "webhook_inbox", `event_id = '${first.id}'`)).toBe(1);
    expect(await count(db, "webhook_inbox_payloads", `event_id = '${first.id}'`)).toBe(1);
    const [dated] = await db<
      { created: number }[]
    >`select extract(epoch from event_created_at)::int as created from webhook_inbox where event_id = ${first.id}`;
    expect(dated?.created).toBe(first.created);
    expect(await count(db, "outbox")).toBe(before.outbox);
    expect(await subscriptionState(db)).toEqual(SUBSCRIPTION_END_STATE);
    expect(await accessMessages(db)).toEqual({
      [SUB_A]: ["SubscriptionAccessStarted", "SubscriptionAccessEnded"],
      [SUB_B]: ["SubscriptionAccessStarted", "SubscriptionAccessEnded", "SubscriptionAccessStarted"],
    });
  });

  test("`receiveSync()`: async_payment_succeeded before completed fulfils once; async_payment_failed after a fulfilment changes nothing", async () => {
    const [, completed, succeeded] = checkoutEvents().map((e) => e.body);
    expect(await receiveSync(db, TARGET, verified(succeeded!))).toBe("processed");
    expect(await receiveSync(db, TARGET, verified(completed!))).toBe("processed");
    // A failed event for the same (fulfilled) session: Stripe never sends both, and a fulfilment is final.
    const failed = JSON.parse(succeeded!) as { id: string; type: string; data: { object: Record<string, unknown> } };
    failed.id = "evt_test_failed_after_fulfil";
    failed.type = "checkout.session.async_payment_failed";
    failed.data.object.payment_status = "unpaid";
    expect(await receiveSync(db, TARGET, verified(JSON.stringify(failed, null, 2)))).toBe("processed");
    expect([...(await db`select state from checkout_sessions`)]).toEqual([{ state: "fulfilled" }]);
    expect([...(await db`select count(*)::int as n from checkout_fulfilments`)]).toEqual([{ n: 1 }]);
    expect([...(await db`select event_type, count(*)::int as n from outbox group by 1`)]).toEqual([
      { event_type: "CheckoutSessionFulfilled", n: 1 },
    ]);
  });

  test("`applyCheckoutSession()` keeps the same session id under two accounts apart: two fulfilments, two messages", async () => {
    const body = JSON.parse(checkoutEvents()[0]!.body) as { data: { object: Record<string, unknown> } };
    for (const account of ["", "acct_1SpConnectedA", undefined, "acct_1SpConnectedA"])
      await db.begin((tx) =>
        applyCheckoutSession(tx, body.data.object, {
          provider: "stripe",
          endpoint: "billing",
          eventId: `evt_${account ?? "none"}`,
          eventType: "checkout.session.completed",
          account,
        }),
      );
    expect([...(await db`select account from checkout_fulfilments order by account`)]).toEqual([
      { account: "" },
      { account: "acct_1SpConnectedA" },
    ]);
    expect([...(await db`select account, payload->>'account' as named from outbox order by 1`)]).toEqual([
      { account: "", named: "" },
      { account: "acct_1SpConnectedA", named: "acct_1SpConnectedA" },
    ]);
  });

  test("a connected account's CheckoutSessionFulfilled and SubscriptionAccess* messages are stored under its account, like its invoice payments", async () => {
    const ACCOUNT = "acct_1SpConnectedA";
    const ofAccount = (body: string) => ({ ...verified(body), account: ACCOUNT });
    const [paidSession] = checkoutEvents().map((e) => e.body);
    const [created, , , invoicePaid] = subscriptionEvents().map((e) => e.body);
    for (const body of [paidSession!, created!, invoicePaid!]) expect(await receiveSync(db, TARGET, ofAccount(body))).toBe("processed");
    expect([...(await db`select event_type, account, payload->>'account' as named from outbox order by event_type`)]).toEqual([
      { event_type: "CheckoutSessionFulfilled", account: ACCOUNT, named: ACCOUNT },
      { event_type: "InvoicePaymentBooked", account: ACCOUNT, named: ACCOUNT },
      { event_type: "SubscriptionAccessStarted", account: ACCOUNT, named: ACCOUNT },
    ]);
  });

  test("a failed or blocked invoice payment books no money and no message; a stale attempt never overwrites a later one", async () => {
    const bodies = subscriptionEvents().map((e) => e.body);
    const [fail1, , fail2, action2] = bodies.slice(4, 8); // 05, 07, 08 (06 is the subscription)
    for (const body of [action2!, fail2!, fail1!]) expect(await receiveSync(db, TARGET, verified(body))).toBe("processed");
    expect([...(await db`select status, attempt_count, dunning from invoices`)]).toEqual([
      { status: "open", attempt_count: 2, dunning: "action_required" },
    ]);
    expect([...(await db`select count(*)::int as n from ledger_entries`)]).toEqual([{ n: 0 }]);
    expect([...(await db`select count(*)::int as n from outbox`)]).toEqual([{ n: 0 }]);
  });
});

describe("subscription states of the same second", () => {
  /** Two `customer.subscription.updated` events of one second: past_due (a failed renewal) and active (paid at once). */
  function sameSecond(): { pastDue: string; active: string; current: Record<string, unknown> } {
    const base = JSON.parse(subscriptionEvents()[5]!.body) as { id: string; created: number; data: { object: Record<string, unknown> } };
    const at = (id: string, status: string) => JSON.stringify({ ...base, id, data: { object: { ...base.data.object, status } } }, null, 2);
    return {
      pastDue: at("evt_1SpT1aLgUG5tbmjc0tiePdu", "past_due"),
      active: at("evt_1SpT1bLgUG5tbmjc0tieAct", "active"),
      current: { ...base.data.object, status: "active" },
    };
  }

  test("without refetch, the tie goes to the more terminal status (past_due), in either order", async () => {
    const { pastDue, active } = sameSecond();
    for (const order of [
      [pastDue, active],
      [active, pastDue],
    ]) {
      await truncateCheckoutSubscriptions(db);
      for (const body of order) expect(await receiveSync(db, TARGET, verified(body))).toBe("processed");
      expect([...(await db`select status from subscriptions`)]).toEqual([{ status: "past_due" }]);
    }
  });

  test(
    "in refetch mode the worker reads the subscription from the (fake) Stripe API: the tie ends in Stripe's current state (active), in either order",
    async () => {
      const { pastDue, active, current } = sameSecond();
      const fake = startFakeStripe();
      try {
        fake.store.put("subscriptions", current as never);
        const apiBase = new URL(fake.url);
        const fetcher = stripeFetcher({
          stripe: stripeApiClient({ apiKey: "sk_test_refetchtie", apiBase }),
          refetchEndpoints: new Set(["billing"]),
          apiBase,
        });
        for (const order of [
          [pastDue, active],
          [active, pastDue],
        ]) {
          await truncateCheckoutSubscriptions(db);
          expect(await deliver("async", order)).toEqual(["queued", "queued"]);
          await drainWithWorkers(fetcher);
          expect([...(await db`select status, has_access from subscriptions`)]).toEqual([{ status: "active", has_access: true }]);
        }
        const reads = fake.store.requests.filter((r) => r.path === `/v1/subscriptions/${String(current.id)}`);
        expect(reads.length).toBe(4);
        expect(reads.every((r) => r.status === 200)).toBe(true);
      } finally {
        await fake.stop();
      }
    },
    WAITS,
  );

  test("an API read of the subscription wins over an event copy of the same or an earlier second, then over older reads", async () => {
    const { pastDue, current } = sameSecond();
    expect(await receiveSync(db, TARGET, verified(pastDue))).toBe("processed");
    const { applySubscription } = await import("../../src/handlers/subscriptions.ts");
    // changeId set: the worker read the object from the API (worker/process-claim.ts).
    await db.begin((tx) =>
      applySubscription(tx, current, {
        provider: "stripe",
        endpoint: "billing",
        eventId: "evt_read",
        eventType: "customer.subscription.updated",
        changeId: "evt_read",
      }),
    );
    expect([...(await db`select status from subscriptions`)]).toEqual([{ status: "active" }]);
    // The stale past_due copy again, under another event id: older than the read, so nothing moves.
    const stale = JSON.parse(pastDue) as { id: string };
    stale.id = "evt_1SpT1cLgUG5tbmjc0tieOld";
    expect(await receiveSync(db, TARGET, verified(JSON.stringify(stale, null, 2)))).toBe("processed");
    expect([...(await db`select status from subscriptions`)]).toEqual([{ status: "active" }]);
  });
});

test(
  "in refetch mode a stale `checkout.session.completed` (unpaid) is applied as `GET /v1/checkout/sessions/:id` returns it (paid): fulfilled once",
  async () => {
    const [, completed, succeeded] = checkoutEvents().map((e) => e.body);
    const current = (JSON.parse(succeeded!) as { data: { object: Record<string, unknown> } }).data.object;
    const fake = startFakeStripe();
    try {
      fake.store.put("checkout/sessions", current as never);
      const apiBase = new URL(fake.url);
      const fetcher = stripeFetcher({
        stripe: stripeApiClient({ apiKey: "sk_test_refetchcheckout", apiBase }),
        refetchEndpoints: new Set(["billing"]),
        apiBase,
      });
      expect((await deliver("async", [completed!, completed!])).sort()).toEqual(["duplicate", "queued"]);
      await drainWithWorkers(fetcher);
      expect([...(await db`select state, payment_status from checkout_sessions`)]).toEqual([
        { state: "fulfilled", payment_status: "paid" },
      ]);
      expect([...(await db`select event_type, count(*)::int as n from outbox group by 1`)]).toEqual([
        { event_type: "CheckoutSessionFulfilled", n: 1 },
      ]);
      expect(fake.store.requests.map((r) => `${r.path} ${r.status}`)).toEqual([`/v1/checkout/sessions/${String(current.id)} 200`]);
    } finally {
      await fake.stop();
    }
  },
  WAITS,
);
