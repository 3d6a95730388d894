// The checkout/ and subscriptions/ fixture sets, the rows they must end in (each set's README), and a
// reader of those rows, shared by the contract suite and the delivery tests.
import type { Db } from "../../src/db/db.ts";
import { readFixtures } from "./helpers.ts";

export const checkoutEvents = () => readFixtures("stripe/checkout");
export const subscriptionEvents = () => readFixtures("stripe/subscriptions");

/** Empties every table the checkout, subscription and billing handlers write. */
export async function truncateCheckoutSubscriptions(db: Db): Promise<void> {
  await db`truncate webhook_inbox, webhook_inbox_payloads, outbox, ledger_entries, invoices, checkout_sessions, checkout_fulfilments, subscriptions, stripe_change_claims`;
}

/** checkout/README.md: sessions by state, fulfilments, and one CheckoutSessionFulfilled message per fulfilment. */
export async function checkoutState(db: Db): Promise<unknown> {
  return {
    sessions: [...(await db`select account, id, state, payment_status, amount_total::int from checkout_sessions order by id`)],
    fulfilments: [...(await db`select account, session_id, amount_total::int, currency from checkout_fulfilments order by session_id`)],
    messages: [
      ...(await db`select aggregate_id, event_type, count(*)::int as n from outbox where aggregate_type = 'CheckoutSession' group by 1, 2 order by 1`),
    ],
  };
}

const PAID = "cs_test_a1SpC1PaidCardSession0000000000000000000000000000000000000";
const ASYNC_OK = "cs_test_a1SpC2AsyncSucceeds00000000000000000000000000000000000000";
const ASYNC_KO = "cs_test_a1SpC3AsyncFails0000000000000000000000000000000000000000";
const EXPIRED = "cs_test_a1SpC4Expires00000000000000000000000000000000000000000000";

export const CHECKOUT_END_STATE = {
  sessions: [
    { account: "", id: PAID, state: "fulfilled", payment_status: "paid", amount_total: 5000 },
    { account: "", id: ASYNC_OK, state: "fulfilled", payment_status: "paid", amount_total: 12000 },
    { account: "", id: ASYNC_KO, state: "payment_failed", payment_status: "unpaid", amount_total: 8000 },
    { account: "", id: EXPIRED, state: "expired", payment_status: "unpaid", amount_total: 3000 },
  ].sort((a, b) => (a.id < b.id ? -1 : 1)),
  fulfilments: [
    { account: "", session_id: PAID, amount_total: 5000, currency: "usd" },
    { account: "", session_id: ASYNC_OK, amount_total: 12000, currency: "usd" },
  ].sort((a, b) => (a.session_id < b.session_id ? -1 : 1)),
  messages: [
    { aggregate_id: PAID, event_type: "CheckoutSessionFulfilled", n: 1 },
    { aggregate_id: ASYNC_OK, event_type: "CheckoutSessionFulfilled", n: 1 },
  ].sort((a, b) => (a.aggregate_id < b.aggregate_id ? -1 : 1)),
};

const DAY = 86_400;
const T0 = 1_767_225_600;
const t1 = T0 + 14 * DAY;
const t2 = t1 + 30 * DAY;
const t3 = t2 + 3 * DAY;
const t4 = t3 + DAY;
const t5 = t4 + 10 * DAY;
const t6 = t2 + 30 * DAY;
const u1 = T0 + 7 * DAY;
const u3 = u1 + 33 * DAY;
export const SUB_A = "sub_1SpS1aLgUG5tbmjc0Lifecyc";
export const SUB_B = "sub_1SpS2aLgUG5tbmjc0PauseRe";

/**
 * subscriptions/README.md: each subscription's row (times as Unix s), each invoice's dunning state, the
 * money booked, and what the access messages came to: `announced` is the access the last
 * Subscription message announced (false when none), `alternating` that no two messages in a row say
 * the same; both hold in any order (counts depend on the order: see `accessMessages`).
 */
export async function subscriptionState(db: Db): Promise<unknown> {
  const messages = await db<{ id: string; kinds: string[] }[]>`
    select aggregate_id as id, array_agg(event_type order by id) as kinds from outbox where aggregate_type = 'Subscription' group by 1
  `;
  const access = Object.fromEntries(
    messages.map((m) => [
      m.id,
      { announced: m.kinds.at(-1) === "SubscriptionAccessStarted", alternating: m.kinds.every((k, i) => k !== m.kinds[i - 1]) },
    ]),
  );
  return {
    subscriptions: [
      ...(await db`
        select account, id, customer_id, status, has_access,
               extract(epoch from current_period_start)::int as period_start, extract(epoch from current_period_end)::int as period_end,
               cancel_at_period_end, extract(epoch from canceled_at)::int as canceled_at, extract(epoch from ended_at)::int as ended_at,
               extract(epoch from trial_end)::int as trial_end
          from subscriptions order by id`),
    ].map((s) => ({ ...s, ...(access[s.id as string] ?? { announced: false, alternating: true }) })),
    invoices: [
      ...(await db`
        select id, status, subscription_id, attempt_count, dunning, extract(epoch from next_payment_attempt)::int as next_payment_attempt
          from invoices order by id`),
    ],
    ledger: [...(await db`select invoice_id, kind, amount::int from ledger_entries order by invoice_id, kind`)],
    payments_announced: (await db<{ n: number }[]>`select count(*)::int as n from outbox where event_type = 'InvoicePaymentBooked'`)[0]?.n,
  };
}

export const SUBSCRIPTION_END_STATE = {
  subscriptions: [
    {
      account: "",
      id: SUB_A,
      customer_id: "cus_TsS1SubscriberA",
      status: "canceled",
      has_access: false,
      period_start: t2,
      period_end: t6,
      cancel_at_period_end: true,
      canceled_at: t5,
      ended_at: t6,
      trial_end: t1,
      announced: false,
      alternating: true,
    },
    {
      account: "",
      id: SUB_B,
      customer_id: "cus_TsS2SubscriberB",
      status: "past_due",
      has_access: true,
      period_start: u3,
      period_end: u3 + 30 * DAY,
      cancel_at_period_end: false,
      canceled_at: null,
      ended_at: null,
      trial_end: u1,
      announced: true,
      alternating: true,
    },
  ],
  invoices: [
    {
      id: "in_1SpS1bLgUG5tbmjc0SubA1xx",
      status: "paid",
      subscription_id: SUB_A,
      attempt_count: 1,
      dunning: null,
      next_payment_attempt: null,
    },
    {
      id: "in_1SpS1cLgUG5tbmjc0SubA2xx",
      status: "paid",
      subscription_id: SUB_A,
      attempt_count: 3,
      dunning: null,
      next_payment_attempt: null,
    },
    {
      id: "in_1SpS2bLgUG5tbmjc0SubB1xx",
      status: "paid",
      subscription_id: SUB_B,
      attempt_count: 1,
      dunning: null,
      next_payment_attempt: null,
    },
    {
      id: "in_1SpS2cLgUG5tbmjc0SubB2xx",
      status: "open",
      subscription_id: SUB_B,
      attempt_count: 1,
      dunning: "action_required",
      next_payment_attempt: u3 + 3 * DAY,
    },
  ],
  ledger: [
    { invoice_id: "in_1SpS1bLgUG5tbmjc0SubA1xx", kind: "payment", amount: 2000 },
    { invoice_id: "in_1SpS1cLgUG5tbmjc0SubA2xx", kind: "payment", amount: 2000 },
    { invoice_id: "in_1SpS2bLgUG5tbmjc0SubB1xx", kind: "payment", amount: 2000 },
  ],
  payments_announced: 3,
};

/** The access messages of each subscription in outbox order, e.g. `{ [SUB_A]: ["SubscriptionAccessStarted", …] }`. */
export async function accessMessages(db: Db): Promise<Record<string, string[]>> {
  const rows = await db<{ id: string; kinds: string[] }[]>`
    select aggregate_id as id, array_agg(event_type order by id) as kinds from outbox where aggregate_type = 'Subscription' group by 1 order by 1
  `;
  return Object.fromEntries(rows.map((r) => [r.id, r.kinds]));
}
