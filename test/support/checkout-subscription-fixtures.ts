// Builds test/fixtures/stripe/checkout/ and test/fixtures/stripe/subscriptions/ from the example
// `checkout.session`, `subscription`, `invoice` and `event` objects Stripe publishes with its OpenAPI
// description (`openapi/fixtures3.json` of github.com/stripe/openapi), as the other fixture sets were:
// each published object is copied whole, then given distinct ids, timestamps, amounts and the states of
// the lifecycle; the envelope is the published `event` with its keys as Stripe sends them. Run once:
//   bun test/support/checkout-subscription-fixtures.ts /path/to/openapi/fixtures3.json
// (the files are committed; the tests read the files, not this script).
import { mkdirSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";

type Obj = Record<string, unknown>;

const API_VERSION = "2025-09-30.clover";
const DAY = 86_400;
/** 2026-01-01T00:00:00Z, Unix seconds: the start of every lifecycle below. */
const T0 = 1_767_225_600;

/** One fixture: its event id, type, `created` (Unix s) and object. */
interface Fixture {
  id: string;
  type: string;
  created: number;
  object: Obj;
}

const clone = <T>(value: T): T => JSON.parse(JSON.stringify(value)) as T;

/** The event body Stripe posts for `f`: the published event's envelope, pretty-printed with two spaces. */
function eventBody(base: Obj, f: Fixture): string {
  const event: Obj = { ...clone(base), api_version: API_VERSION, created: f.created, data: { object: f.object }, id: f.id };
  event.pending_webhooks = 1;
  event.type = f.type;
  const sorted = Object.fromEntries(Object.keys(event).sort().map((k) => [k, event[k]]));
  return JSON.stringify(sorted, null, 2);
}

/** Writes `fixtures` into `dir` as NN_<type>_<id>.json, replacing the set's old JSON files. */
function writeSet(dir: string, base: Obj, fixtures: Fixture[]): void {
  mkdirSync(dir, { recursive: true });
  for (const f of readdirSync(dir)) if (f.endsWith(".json")) rmSync(join(dir, f));
  fixtures.forEach((f, i) => {
    const name = `${String(i + 1).padStart(2, "0")}_${f.type}_${f.id}.json`;
    writeFileSync(join(dir, name), eventBody(base, f) + "\n");
  });
}

function checkoutSet(session: Obj): Fixture[] {
  const s = (id: string, over: Obj): Obj => ({
    ...clone(session),
    id,
    url: null,
    created: T0,
    expires_at: T0 + DAY,
    customer: "cus_TsC1CheckoutBuyer",
    customer_email: "buyer@example.com",
    currency: "usd",
    currency_conversion: null,
    shipping_cost: null,
    total_details: { amount_discount: 0, amount_shipping: 0, amount_tax: 0 },
    ...over,
  });
  const PAID = "cs_test_a1SpC1PaidCardSession0000000000000000000000000000000000000";
  const ASYNC_OK = "cs_test_a1SpC2AsyncSucceeds00000000000000000000000000000000000000";
  const ASYNC_KO = "cs_test_a1SpC3AsyncFails0000000000000000000000000000000000000000";
  const EXPIRED = "cs_test_a1SpC4Expires00000000000000000000000000000000000000000000";
  const money = (amount: number) => ({ amount_subtotal: amount, amount_total: amount });
  const bank = { payment_method_types: ["us_bank_account"] };
  return [
    {
      id: "evt_1SpC1aLgUG5tbmjc0csPaid",
      type: "checkout.session.completed",
      created: T0 + 60,
      object: s(PAID, { ...money(5000), status: "complete", payment_status: "paid", payment_intent: "pi_3SpC1aLgUG5tbmjc0csPaid" }),
    },
    {
      id: "evt_1SpC2aLgUG5tbmjc0csAsOk",
      type: "checkout.session.completed",
      created: T0 + 120,
      object: s(ASYNC_OK, { ...money(12000), ...bank, status: "complete", payment_status: "unpaid", payment_intent: "pi_3SpC2aLgUG5tbmjc0csAsOk" }),
    },
    {
      id: "evt_1SpC2bLgUG5tbmjc0csAsOk",
      type: "checkout.session.async_payment_succeeded",
      created: T0 + 120 + 3 * DAY,
      object: s(ASYNC_OK, { ...money(12000), ...bank, status: "complete", payment_status: "paid", payment_intent: "pi_3SpC2aLgUG5tbmjc0csAsOk" }),
    },
    {
      id: "evt_1SpC3aLgUG5tbmjc0csAsKo",
      type: "checkout.session.completed",
      created: T0 + 180,
      object: s(ASYNC_KO, { ...money(8000), ...bank, status: "complete", payment_status: "unpaid", payment_intent: "pi_3SpC3aLgUG5tbmjc0csAsKo" }),
    },
    {
      id: "evt_1SpC3bLgUG5tbmjc0csAsKo",
      type: "checkout.session.async_payment_failed",
      created: T0 + 180 + 4 * DAY,
      object: s(ASYNC_KO, { ...money(8000), ...bank, status: "complete", payment_status: "unpaid", payment_intent: "pi_3SpC3aLgUG5tbmjc0csAsKo" }),
    },
    {
      id: "evt_1SpC4aLgUG5tbmjc0csExpd",
      type: "checkout.session.expired",
      created: T0 + 240 + DAY,
      object: s(EXPIRED, { ...money(3000), created: T0 + 240, expires_at: T0 + 240 + DAY, status: "expired", payment_status: "unpaid", payment_intent: null }),
    },
  ];
}

/** A subscription in one state: `status`, its item's current period, and the other fields given. */
function subscriptionAt(base: Obj, id: string, customer: string, status: string, period: [number, number], over: Obj): Obj {
  const sub = clone(base);
  const items = sub.items as { data: Obj[]; url: string };
  const item: Obj = { ...(items.data[0] as Obj), id: `si_${id.slice(4, 18)}`, subscription: id, created: T0 };
  item.current_period_start = period[0];
  item.current_period_end = period[1];
  (item.price as Obj).id = "price_1SpS0aLgUG5tbmjcMonthly";
  item.plan = null;
  items.data = [item];
  items.url = `/v1/subscription_items?subscription=${id}`;
  return {
    ...sub,
    id,
    customer,
    status,
    created: T0,
    start_date: T0,
    billing_cycle_anchor: period[0],
    billing_cycle_anchor_config: null,
    cancel_at: null,
    canceled_at: null,
    cancel_at_period_end: false,
    ended_at: null,
    next_pending_invoice_item_invoice: null,
    pause_collection: null,
    pending_invoice_item_interval: null,
    pending_update: null,
    transfer_data: null,
    billing_schedules: [],
    latest_invoice: null,
    ...over,
  };
}

/** An invoice of `subscription` for 2000 usd in one state. */
function invoiceAt(base: Obj, id: string, customer: string, subscription: string, created: number, over: Obj): Obj {
  const inv = clone(base);
  const lines = inv.lines as { data: Obj[]; url: string };
  lines.data = lines.data.slice(0, 1).map((line) => ({ ...line, id: `il_${id.slice(3, 17)}`, invoice: id, amount: 2000, subtotal: 2000, currency: "usd" }));
  lines.url = `/v1/invoices/${id}/lines`;
  return {
    ...inv,
    id,
    customer,
    currency: "usd",
    created,
    period_start: created,
    period_end: created,
    amount_due: 2000,
    amount_paid: 0,
    amount_remaining: 2000,
    amount_overpaid: 0,
    subtotal: 2000,
    subtotal_excluding_tax: 2000,
    total: 2000,
    total_excluding_tax: 2000,
    billing_reason: "subscription_cycle",
    parent: { quote_details: null, subscription_details: { metadata: {}, subscription }, type: "subscription_details" },
    status: "open",
    attempted: true,
    attempt_count: 1,
    next_payment_attempt: null,
    hosted_invoice_url: null,
    invoice_pdf: null,
    ...over,
  };
}

function subscriptionSet(sub: Obj, invoice: Obj): Fixture[] {
  // A: trial → active → past_due (two failed attempts, the second needing 3D Secure) → active → canceled.
  const A = "sub_1SpS1aLgUG5tbmjc0Lifecyc";
  const cusA = "cus_TsS1SubscriberA";
  const t1 = T0 + 14 * DAY; // trial end: the first invoice is paid
  const t2 = t1 + 30 * DAY; // renewal: its invoice fails
  const t3 = t2 + 3 * DAY; // retry: fails again, needs authentication
  const t4 = t3 + DAY; // the customer authenticates: paid
  const t5 = t4 + 10 * DAY; // cancellation requested at period end
  const t6 = t2 + 30 * DAY; // the period ends: canceled
  const pA0: [number, number] = [T0, t1];
  const pA1: [number, number] = [t1, t2];
  const pA2: [number, number] = [t2, t6];
  const trialA = { trial_start: T0, trial_end: t1, trial_settings: { end_behavior: { missing_payment_method: "create_invoice" } } };
  const a = (status: string, period: [number, number], over: Obj = {}) => subscriptionAt(sub, A, cusA, status, period, { ...trialA, ...over });
  const IA1 = "in_1SpS1bLgUG5tbmjc0SubA1xx";
  const IA2 = "in_1SpS1cLgUG5tbmjc0SubA2xx";
  const ia = (id: string, created: number, over: Obj) => invoiceAt(invoice, id, cusA, A, created, over);
  const paidA1 = { status: "paid", amount_paid: 2000, amount_remaining: 0, attempt_count: 1, billing_reason: "subscription_cycle" };
  // B: trial without a payment method → paused → resumed (active) → its renewal needs 3D Secure: past_due.
  const B = "sub_1SpS2aLgUG5tbmjc0PauseRe";
  const cusB = "cus_TsS2SubscriberB";
  const u1 = T0 + 7 * DAY; // trial end: paused (no payment method)
  const u2 = u1 + 3 * DAY; // resumed: a new period from now, its invoice paid at once
  const u3 = u2 + 30 * DAY; // renewal: needs authentication, fails
  const trialB = { trial_start: T0, trial_end: u1, trial_settings: { end_behavior: { missing_payment_method: "pause" } } };
  const b = (status: string, period: [number, number], over: Obj = {}) => subscriptionAt(sub, B, cusB, status, period, { ...trialB, ...over });
  const IB1 = "in_1SpS2bLgUG5tbmjc0SubB1xx";
  const IB2 = "in_1SpS2cLgUG5tbmjc0SubB2xx";
  const ib = (id: string, created: number, over: Obj) => invoiceAt(invoice, id, cusB, B, created, over);
  return [
    { id: "evt_1SpS1aLgUG5tbmjc0sAcrea", type: "customer.subscription.created", created: T0, object: a("trialing", pA0) },
    { id: "evt_1SpS1bLgUG5tbmjc0sAtwen", type: "customer.subscription.trial_will_end", created: t1 - 3 * DAY, object: a("trialing", pA0) },
    { id: "evt_1SpS1cLgUG5tbmjc0sAactv", type: "customer.subscription.updated", created: t1, object: a("active", pA1, { latest_invoice: IA1 }) },
    { id: "evt_1SpS1dLgUG5tbmjc0iA1pad", type: "invoice.paid", created: t1, object: ia(IA1, t1, { ...paidA1, billing_reason: "subscription_create" }) },
    {
      id: "evt_1SpS1eLgUG5tbmjc0iA2fl1",
      type: "invoice.payment_failed",
      created: t2,
      object: ia(IA2, t2, { attempt_count: 1, next_payment_attempt: t3 }),
    },
    { id: "evt_1SpS1fLgUG5tbmjc0sApdue", type: "customer.subscription.updated", created: t2, object: a("past_due", pA2, { latest_invoice: IA2 }) },
    {
      id: "evt_1SpS1gLgUG5tbmjc0iA2fl2",
      type: "invoice.payment_failed",
      created: t3,
      object: ia(IA2, t2, { attempt_count: 2, next_payment_attempt: t3 + 5 * DAY }),
    },
    {
      id: "evt_1SpS1hLgUG5tbmjc0iA2act",
      type: "invoice.payment_action_required",
      created: t3,
      object: ia(IA2, t2, { attempt_count: 2, next_payment_attempt: t3 + 5 * DAY }),
    },
    { id: "evt_1SpS1iLgUG5tbmjc0iA2pad", type: "invoice.paid", created: t4, object: ia(IA2, t2, { ...paidA1, attempt_count: 3 }) },
    { id: "evt_1SpS1jLgUG5tbmjc0sAback", type: "customer.subscription.updated", created: t4, object: a("active", pA2, { latest_invoice: IA2 }) },
    {
      id: "evt_1SpS1kLgUG5tbmjc0sAcape",
      type: "customer.subscription.updated",
      created: t5,
      object: a("active", pA2, { latest_invoice: IA2, cancel_at_period_end: true, cancel_at: t6, canceled_at: t5 }),
    },
    {
      id: "evt_1SpS1lLgUG5tbmjc0sAcanc",
      type: "customer.subscription.updated",
      created: t6,
      object: a("canceled", pA2, { latest_invoice: IA2, cancel_at_period_end: true, cancel_at: t6, canceled_at: t5, ended_at: t6 }),
    },
    {
      id: "evt_1SpS1mLgUG5tbmjc0sAdele",
      type: "customer.subscription.deleted",
      created: t6,
      object: a("canceled", pA2, { latest_invoice: IA2, cancel_at_period_end: true, cancel_at: t6, canceled_at: t5, ended_at: t6 }),
    },
    { id: "evt_1SpS2aLgUG5tbmjc0sBcrea", type: "customer.subscription.created", created: T0, object: b("trialing", [T0, u1]) },
    { id: "evt_1SpS2bLgUG5tbmjc0sBtwen", type: "customer.subscription.trial_will_end", created: u1 - 3 * DAY, object: b("trialing", [T0, u1]) },
    { id: "evt_1SpS2cLgUG5tbmjc0sBpaus", type: "customer.subscription.paused", created: u1, object: b("paused", [u1, u1 + 30 * DAY]) },
    { id: "evt_1SpS2dLgUG5tbmjc0sBupps", type: "customer.subscription.updated", created: u1, object: b("paused", [u1, u1 + 30 * DAY]) },
    { id: "evt_1SpS2eLgUG5tbmjc0sBresu", type: "customer.subscription.resumed", created: u2, object: b("active", [u2, u3], { latest_invoice: IB1 }) },
    { id: "evt_1SpS2fLgUG5tbmjc0sBupac", type: "customer.subscription.updated", created: u2, object: b("active", [u2, u3], { latest_invoice: IB1 }) },
    {
      id: "evt_1SpS2gLgUG5tbmjc0iB1pad",
      type: "invoice.paid",
      created: u2,
      object: ib(IB1, u2, { ...paidA1, billing_reason: "subscription_update" }),
    },
    {
      id: "evt_1SpS2hLgUG5tbmjc0iB2act",
      type: "invoice.payment_action_required",
      created: u3,
      object: ib(IB2, u3, { attempt_count: 1, next_payment_attempt: u3 + 3 * DAY }),
    },
    {
      id: "evt_1SpS2iLgUG5tbmjc0iB2fl1",
      type: "invoice.payment_failed",
      created: u3,
      object: ib(IB2, u3, { attempt_count: 1, next_payment_attempt: u3 + 3 * DAY }),
    },
    { id: "evt_1SpS2jLgUG5tbmjc0sBpdue", type: "customer.subscription.updated", created: u3, object: b("past_due", [u3, u3 + 30 * DAY], { latest_invoice: IB2 }) },
  ];
}

if (import.meta.main) {
  const path = process.argv[2];
  if (!path) {
    console.error("Usage: bun test/support/checkout-subscription-fixtures.ts <openapi/fixtures3.json>");
    process.exit(2);
  }
  const published = (await Bun.file(path).json()) as { resources: Record<string, Obj> };
  const r = (name: string): Obj => {
    const object = published.resources[name];
    if (!object) throw new Error(`${path} has no resources.${name}`);
    return object;
  };
  const dir = join(import.meta.dir, "..", "fixtures", "stripe");
  writeSet(join(dir, "checkout"), r("event"), checkoutSet(r("checkout.session")));
  writeSet(join(dir, "subscriptions"), r("event"), subscriptionSet(r("subscription"), r("invoice")));
}
