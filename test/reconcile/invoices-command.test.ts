// `reconcile invoices` against real PostgreSQL and the fake Stripe API (driven through stripe-node):
// every drift class is found, repaired (or parked) once, a second run writes nothing, --dry-run
// writes nothing, a repair racing a late webhook books once in either order, 429s only delay.
import { afterAll, beforeEach, describe, expect, test } from "bun:test";
import { join } from "node:path";
import { connect, type Db } from "../../src/db/db.ts";
import { startFakeStripe } from "../../src/dev/fake-stripe/serve.ts";
import { FakeStripeStore } from "../../src/dev/fake-stripe/store.ts";
import { PermanentError } from "../../src/handlers/handler-table.ts";
import { stripeHandlers } from "../../src/handlers/stripe-money.ts";
import { replayEvent } from "../../src/ops/replay.ts";
import type { DriftClass } from "../../src/reconcile/invoice-drift.ts";
import { reconcileInvoicesCommand } from "../../src/reconcile/invoices-command.ts";
import type { Reconciliation } from "../../src/reconcile/reconcile-command.ts";
import { receiveSync, recordFallback, type ReceiveTarget } from "../../src/receiver/receive.ts";
import { eventBody, freshDatabase, invoice, verified } from "../support/helpers.ts";
import { waitUntil } from "../support/wait-until.ts";

const KEY = "sk_test_reconcileinvoices1";
const fresh = await freshDatabase();
const db = fresh.db;
const store = new FakeStripeStore(KEY);
const fake = startFakeStripe({ store });
const ENV = { STRIPE_API_KEY: KEY, STRIPE_API_BASE: fake.url };
const BILLING: ReceiveTarget = { provider: "stripe", endpoint: "billing", handlers: stripeHandlers };
const NOW = Math.floor(Date.now() / 1000);
afterAll(async () => {
  await fake.stop();
  await fresh.drop();
});
beforeEach(async () => {
  await db`truncate webhook_inbox, outbox, ledger_entries, invoices, reconcile_runs`;
  store.objects.clear();
  store.requests.length = 0;
  store.faults.length = 0;
  store.rateLimitFraction = 0;
});

/** Runs the command in-process on its own connection (named `app` in pg_stat_activity); output captured. */
async function reconcile(args: string[], options: { env?: Record<string, string | undefined>; app?: string } = {}) {
  const out: string[] = [];
  const err: string[] = [];
  const code = await reconcileInvoicesCommand(args, options.env ?? ENV, {
    async openDatabase() {
      const own = connect(fresh.url, { max: 1, applicationName: options.app ?? "reconcile-test" });
      return { db: own, close: () => own.end({ timeout: 5 }) };
    },
    out: (l) => out.push(l),
    err: (l) => err.push(l),
    retry: { baseMs: 1, maxMs: 4 },
    pageSize: 3,
  });
  const text = out.join("\n");
  return { code, text, err: err.join("\n"), json: () => JSON.parse(text) as Reconciliation };
}

/** Stripe's side: an invoice in the fake, created `ageSec` ago. */
function inStripe(id: string, fields: Record<string, unknown>, ageSec = 60): Record<string, unknown> {
  const object = invoice({ id, created: NOW - ageSec, livemode: false, ...fields });
  store.put("invoices", object as { id: string; object: string; created: number });
  return object;
}

/** The local side, written as it stands (also states no handler would produce). */
async function local(id: string, status: string, f: { currency?: string; due?: number; paid?: number; booked?: number } = {}) {
  await db`
    insert into invoices (id, customer_id, status, currency, amount_due, amount_paid)
    values (${id}, 'cus_test_1', ${status}, ${f.currency ?? "usd"}, ${f.due ?? 2000}, ${f.paid ?? 0})
  `;
  if (f.booked !== undefined)
    await db`insert into ledger_entries (invoice_id, kind, amount, currency, event_id) values (${id}, 'payment', ${f.booked}, ${f.currency ?? "usd"}, 'evt_old')`;
}

/** Every row the command could write, for "wrote nothing" checks. */
async function snapshot() {
  return {
    invoices: await db`select id, status, currency, amount_due::int, amount_paid::int from invoices order by id`,
    ledger: await db`select invoice_id, kind, amount::int, event_id from ledger_entries order by id`,
    inbox:
      await db`select event_id, event_type, outcome, source, needs_review_at is not null as parked, resolution_note from webhook_inbox order by event_id`,
    outbox: await db`select aggregate_id, event_type from outbox order by id`,
  };
}

/** One invoice per drift class, one in sync, one outside the window. */
async function everyClass() {
  inStripe("in_missing", { status: "paid", amount_paid: 2000 });
  inStripe("in_behind", { status: "void" });
  await local("in_behind", "open");
  inStripe("in_paymiss", { status: "paid", amount_due: 3000, amount_paid: 3000 });
  await local("in_paymiss", "open", { due: 3000 });
  inStripe("in_differs", { status: "paid", amount_due: 2500, amount_paid: 2500 });
  await local("in_differs", "paid", { due: 2500, paid: 2000, booked: 2000 });
  inStripe("in_void", { status: "void" });
  await local("in_void", "paid", { paid: 2000, booked: 2000 });
  inStripe("in_cur", { status: "open", currency: "eur" });
  await local("in_cur", "open");
  inStripe("in_paidvoid", { status: "paid", amount_paid: 2000 });
  await local("in_paidvoid", "void");
  inStripe("in_ahead", { status: "open" });
  await local("in_ahead", "uncollectible");
  inStripe("in_due", { status: "open", amount_due: 5000 });
  await local("in_due", "open", { due: 4000 });
  inStripe("in_ok", { status: "paid", amount_paid: 2000 });
  await local("in_ok", "paid", { paid: 2000, booked: 2000 });
  inStripe("in_old", { status: "paid", amount_paid: 2000 }, 40 * 86_400);
}

/** The runs recorded for /metrics (sql/0029 reconcile_runs): kind, account, checked, drifted, repaired. */
async function runs() {
  return db<{ kind: string; account: string; checked: number; drifted: number; repaired: number }[]>`
    select kind, account, checked, drifted, repaired from reconcile_runs order by kind, account
  `;
}

const CLASSES: Record<string, DriftClass> = {
  in_missing: "missing_locally",
  in_behind: "status_behind",
  in_paymiss: "payment_missing",
  in_differs: "payment_amount_differs",
  in_void: "booked_but_void",
  in_cur: "currency_differs",
  in_paidvoid: "paid_but_void_locally",
  in_ahead: "status_ahead",
  in_due: "amount_due_differs",
};
const REPAIRABLE = ["in_missing", "in_behind", "in_paymiss"];

describe("reconcile invoices", () => {
  test("`reconcileInvoicesCommand()` finds each drift class, prints it in --json, writes nothing but its run (for /metrics) and exits 1", async () => {
    await everyClass();
    const before = await snapshot();
    const run = await reconcile(["--json"]);
    expect(run.code).toBe(1);
    const report = run.json();
    expect(report.checked).toBe(10); // in_old is outside the 30-day window
    expect(Object.fromEntries(report.drift.map((d) => [d.id, d.drift]))).toEqual(CLASSES);
    expect(Object.values(report.byClass).every((n) => n === 1)).toBe(true);
    // The run is kept for /metrics (alert WebhookReconcileDrift), its drift by class.
    expect([...(await runs())]).toEqual([{ kind: "invoices", account: "", checked: 10, drifted: 9, repaired: 0 }]);
    const [byClass] = await db<{ by_class: Record<string, number> }[]>`select by_class from reconcile_runs`;
    expect(byClass?.by_class).toEqual(Object.fromEntries(Object.values(CLASSES).map((c) => [c, 1])));
    expect(
      report.drift
        .filter((d) => d.repairable)
        .map((d) => d.id)
        .sort(),
    ).toEqual([...REPAIRABLE].sort());
    expect(report.drift.find((d) => d.id === "in_differs")).toMatchObject({
      stripe: { status: "paid", amountPaid: 2500, currency: "usd" },
      local: { status: "paid", booked: 2000 },
    });
    expect(await snapshot()).toEqual(before);
    // Paged with starting_after, 3 a page: 10 invoices in 4 requests.
    expect(store.requests.filter((r) => r.path === "/v1/invoices").length).toBe(4);
    const text = await reconcile([]);
    expect(text.code).toBe(1);
    expect(text.text).toContain("Checked 10 Stripe invoices");
    expect(text.text).toContain("in_void  booked_but_void");
  });

  test("`reconcileInvoicesCommand()` --repair --dry-run says what it would record and writes nothing", async () => {
    await everyClass();
    const before = await snapshot();
    const run = await reconcile(["--repair", "--dry-run", "--json"]);
    expect(run.code).toBe(1);
    const repairs = Object.fromEntries(run.json().drift.map((d) => [d.id, d.repair]));
    expect(repairs.in_missing).toEqual({ key: "reconcile:in_missing:paid:2000", outcome: "would_repair" });
    expect(repairs.in_void).toEqual({ key: "reconcile:in_void:void:0:booked_but_void", outcome: "would_park" });
    expect(await snapshot()).toEqual(before);
    expect([...(await runs())]).toEqual([]); // a dry run writes nothing, not even its run
  });

  test("`reconcileInvoicesCommand()` --repair repairs each repairable class once, parks the rest, and a second run writes nothing", async () => {
    await everyClass();
    const first = await reconcile(["--repair", "--json"]);
    expect(first.code).toBe(1);
    const outcomes = Object.fromEntries(first.json().drift.map((d) => [d.id, d.repair?.outcome]));
    for (const id of Object.keys(CLASSES)) expect(outcomes[id]).toBe(REPAIRABLE.includes(id) ? "repaired" : "needs_review");
    expect([...(await runs())]).toEqual([{ kind: "invoices", account: "", checked: 10, drifted: 9, repaired: 3 }]);

    const after = await snapshot();
    expect(after.invoices.filter((i) => REPAIRABLE.includes(i.id))).toEqual([
      { id: "in_behind", status: "void", currency: "usd", amount_due: 2000, amount_paid: 0 },
      { id: "in_missing", status: "paid", currency: "usd", amount_due: 2000, amount_paid: 2000 },
      { id: "in_paymiss", status: "paid", currency: "usd", amount_due: 3000, amount_paid: 3000 },
    ]);
    // The not-repairable ones are untouched locally: no move backwards, no second booking.
    expect(after.invoices.find((i) => i.id === "in_void")).toMatchObject({ status: "paid" });
    expect(after.invoices.find((i) => i.id === "in_differs")).toMatchObject({ amount_paid: 2000 });
    expect(after.ledger.map((l) => [l.invoice_id, l.amount, l.event_id])).toEqual([
      ["in_differs", 2000, "evt_old"],
      ["in_void", 2000, "evt_old"],
      ["in_ok", 2000, "evt_old"],
      // Stripe lists newest first: in_paymiss (put later, same second) is repaired before in_missing.
      ["in_paymiss", 3000, "reconcile:in_paymiss:paid:3000"],
      ["in_missing", 2000, "reconcile:in_missing:paid:2000"],
    ]);
    expect(after.outbox.map((o) => o.aggregate_id).sort()).toEqual(["in_missing", "in_paymiss"]);
    // Every repair is an inbox row of its own, source reconcile: processed, or parked for an operator.
    expect(after.inbox.map((r) => [r.event_id, r.event_type, r.outcome, r.source, r.parked])).toEqual([
      ["reconcile:in_ahead:open:0:status_ahead", "invoice.finalized", null, "reconcile", true],
      ["reconcile:in_behind:void:0", "invoice.voided", "processed", "reconcile", false],
      ["reconcile:in_cur:open:0:currency_differs", "invoice.finalized", null, "reconcile", true],
      ["reconcile:in_differs:paid:2500:payment_amount_differs", "invoice.paid", null, "reconcile", true],
      ["reconcile:in_due:open:0:amount_due_differs", "invoice.finalized", null, "reconcile", true],
      ["reconcile:in_missing:paid:2000", "invoice.paid", "processed", "reconcile", false],
      ["reconcile:in_paidvoid:paid:2000:paid_but_void_locally", "invoice.paid", null, "reconcile", true],
      ["reconcile:in_paymiss:paid:3000", "invoice.paid", "processed", "reconcile", false],
      ["reconcile:in_void:void:0:booked_but_void", "invoice.voided", null, "reconcile", true],
    ]);
    const [parked] = await db<
      { last_error: string }[]
    >`select last_error from webhook_inbox where event_id = 'reconcile:in_void:void:0:booked_but_void'`;
    expect(parked?.last_error).toContain("booked_but_void");

    // A repair row is an event like any other for operators: replaying it changes nothing.
    const replayed = await replayEvent(
      db,
      { provider: "stripe", endpoint: "billing", eventId: "reconcile:in_missing:paid:2000" },
      stripeHandlers,
    );
    expect(replayed.inserted).toBe(0);

    const second = await reconcile(["--repair", "--json"]);
    expect(second.code).toBe(1); // the parked drift is still there until an operator acts
    const left = second.json().drift;
    expect(left.map((d) => d.id).sort()).toEqual(
      Object.keys(CLASSES)
        .filter((id) => !REPAIRABLE.includes(id))
        .sort(),
    );
    expect(left.every((d) => d.repair?.outcome === "duplicate")).toBe(true);
    expect(await snapshot()).toEqual(after);
    expect([...(await runs())]).toEqual([{ kind: "invoices", account: "", checked: 10, drifted: 6, repaired: 0 }]);
  });

  test("`reconcileInvoicesCommand()` exits 0 and prints no drift when every invoice matches", async () => {
    inStripe("in_ok", { status: "paid", amount_paid: 2000 });
    await local("in_ok", "paid", { paid: 2000, booked: 2000 });
    inStripe("in_open", { status: "open" });
    await local("in_open", "open");
    const run = await reconcile(["--repair"]);
    expect(run.code).toBe(0);
    expect(run.text).toContain("Checked 2 Stripe invoices");
    expect(run.text).toContain("no drift");
    expect((await snapshot()).inbox.length).toBe(0);
    expect([...(await runs())]).toEqual([{ kind: "invoices", account: "", checked: 2, drifted: 0, repaired: 0 }]);
  });

  test("`reconcileInvoicesCommand()` --repair resolves the invoice's needs-review rows it settles, with a note naming the repair", async () => {
    inStripe("in_parked", { status: "paid", amount_paid: 2000 });
    const body = eventBody("evt_parked", "invoice.paid", invoice({ id: "in_parked", status: "paid", amount_paid: 2000 }));
    const other = eventBody("evt_other", "invoice.paid", invoice({ id: "in_other", status: "paid", amount_paid: 2000 }));
    const backoff = { baseMs: 1000, capMs: 1000 };
    expect(await recordFallback(db, BILLING, verified(body), new PermanentError("Gave up after 10 attempts"), backoff)).toBe(
      "needs_review",
    );
    expect(await recordFallback(db, BILLING, verified(other), new PermanentError("Gave up after 10 attempts"), backoff)).toBe(
      "needs_review",
    );
    const run = await reconcile(["--repair", "--json"]);
    expect(run.json().drift[0]?.repair).toMatchObject({ outcome: "repaired", resolved: 1 });
    const rows = await db<{ event_id: string; state: string; resolution_note: string | null }[]>`
      select event_id, state, resolution_note from webhook_inbox_state where event_id like 'evt_%' order by event_id
    `;
    expect(rows[0]).toMatchObject({ event_id: "evt_other", state: "needs_review", resolution_note: null });
    expect(rows[1]?.state).toBe("resolved");
    expect(rows[1]?.resolution_note).toContain("reconcile:in_parked:paid:2000");
    expect([...(await db`select amount::int from ledger_entries where invoice_id = 'in_parked'`)]).toEqual([{ amount: 2000 }]);
  });

  test("`reconcileInvoicesCommand()` --repair parks an invoice the handler refuses, and books nothing", async () => {
    inStripe("in_short", { status: "paid", amount_due: 2000, amount_paid: 1500 });
    await local("in_short", "open");
    const first = await reconcile(["--repair", "--json"]);
    expect(first.json().drift[0]).toMatchObject({ drift: "payment_missing", repair: { outcome: "needs_review" } });
    expect(first.json().drift[0]?.repair).toMatchObject({ error: expect.stringContaining("amount_paid below amount_due") });
    expect([...(await db`select status from invoices where id = 'in_short'`)]).toEqual([{ status: "open" }]);
    expect([...(await db`select 1 from ledger_entries`)]).toEqual([]);
    const second = await reconcile(["--repair", "--json"]);
    expect(second.json().drift[0]?.repair?.outcome).toBe("duplicate");
  });

  for (const first of ["webhook", "repair"] as const) {
    test(`\`reconcileInvoicesCommand()\` --repair racing a late webhook books once when the ${first} takes the invoice first`, async () => {
      const object = inStripe("in_race", { status: "paid", amount_paid: 2000 });
      await local("in_race", "open");
      const hook = connect(fresh.url, { max: 1, applicationName: "late-webhook" });
      const blocker = connect(fresh.url, { max: 1 });
      let release!: () => void;
      const held = new Promise<void>((r) => (release = r));
      let locked!: () => void;
      const isLocked = new Promise<void>((r) => (locked = r));
      const holding = blocker.begin(async (tx) => {
        await tx`select 1 from invoices where id = 'in_race' for update`;
        locked();
        await held;
      });
      await isLocked;
      const waiting = (app: string) => async () =>
        (
          await db`select 1 from pg_stat_activity where datname = current_database() and application_name = ${app} and wait_event_type = 'Lock'`
        ).length === 1;
      const webhook = () => receiveSync(hook, BILLING, verified(eventBody("evt_late_paid", "invoice.paid", object)));
      const repair = () => reconcile(["--repair", "--json"], { app: "reconcile-race" });
      try {
        const [a, b] = first === "webhook" ? [webhook(), null] : [null, repair()];
        await waitUntil("the first actor waiting on the invoice", waiting(first === "webhook" ? "late-webhook" : "reconcile-race"));
        const [c, d] = first === "webhook" ? [null, repair()] : [webhook(), null];
        await waitUntil("the second actor waiting on the invoice", waiting(first === "webhook" ? "reconcile-race" : "late-webhook"));
        release();
        await holding;
        const outcome = await (a ?? c)!;
        const run = await (b ?? d)!;
        expect(outcome).toBe("processed");
        expect(run.json().drift[0]?.repair?.outcome).toBe("repaired");
      } finally {
        release();
        await hook.end({ timeout: 5 });
        await blocker.end({ timeout: 5 });
      }
      const booked = [...(await db<{ amount: number; event_id: string }[]>`select amount::int, event_id from ledger_entries`)];
      expect(booked).toEqual([{ amount: 2000, event_id: first === "webhook" ? "evt_late_paid" : "reconcile:in_race:paid:2000" }]);
      expect([...(await db`select status, amount_paid::int from invoices`)]).toEqual([{ status: "paid", amount_paid: 2000 }]);
      expect((await snapshot()).outbox.length).toBe(1);
      const again = await reconcile(["--repair"]);
      expect(again.code).toBe(0);
    });
  }

  test("`reconcileInvoicesCommand()` --repair and a webhook for a missing invoice at the same moment book it once", async () => {
    for (let i = 0; i < 5; i++) {
      const id = `in_same_${i}`;
      const object = inStripe(id, { status: "paid", amount_due: 700, amount_paid: 700 });
      const hook = connect(fresh.url, { max: 1 });
      try {
        const [outcome, run] = await Promise.all([
          receiveSync(hook, BILLING, verified(eventBody(`evt_same_${i}`, "invoice.paid", object))),
          reconcile(["--repair", "--json"]),
        ]);
        expect(outcome).toBe("processed");
        expect(run.code === 0 || run.code === 1).toBe(true);
      } finally {
        await hook.end({ timeout: 5 });
      }
      expect([...(await db`select amount::int from ledger_entries where invoice_id = ${id}`)]).toEqual([{ amount: 700 }]);
      expect([...(await db`select status from invoices where id = ${id}`)]).toEqual([{ status: "paid" }]);
    }
    expect((await snapshot()).outbox.length).toBe(5);
    expect((await reconcile([])).code).toBe(0);
  }, 60_000);

  test("`reconcileInvoicesCommand()` gets through a 429 storm from Stripe: slower, same result", async () => {
    for (let i = 0; i < 7; i++) inStripe(`in_storm_${i}`, { status: "open" });
    store.failNext(4, 429, /^\/v1\/invoices$/);
    store.rateLimitFraction = 0.3;
    const run = await reconcile(["--repair", "--json"]);
    expect(run.code).toBe(1);
    expect(run.json().checked).toBe(7);
    expect(run.json().byClass).toEqual({ missing_locally: 7 });
    expect(store.requests.filter((r) => r.status === 429).length).toBeGreaterThanOrEqual(4);
    expect(run.err).toContain(`Stripe API at ${new URL(fake.url).host} answered HTTP 429`);
    expect([...(await db`select count(*)::int as n from invoices where status = 'open'`)]).toEqual([{ n: 7 }]);
  });

  test("`reconcileInvoicesCommand()` exits 2 on a usage or configuration error and never quotes the key", async () => {
    expect((await reconcile(["--bogus"])).code).toBe(2);
    expect((await reconcile(["--since", "yesterday"])).code).toBe(2);
    expect((await reconcile(["--since", "2026-02-31"])).code).toBe(2);
    expect((await reconcile(["extra"])).code).toBe(2);
    const noKey = await reconcile([], { env: { STRIPE_API_BASE: fake.url } });
    expect(noKey.code).toBe(2);
    expect(noKey.err).toContain("STRIPE_API_KEY is required");
    const badKey = await reconcile([], { env: { STRIPE_API_KEY: "sk_test_secret!value", STRIPE_API_BASE: fake.url } });
    expect(badKey.code).toBe(2);
    expect(badKey.err).not.toContain("secret!value");
    expect((await reconcile(["--help"])).code).toBe(0);
  });

  test("`reconcileInvoicesCommand()` exits 1 when Stripe refuses the key, and --since picks the window", async () => {
    inStripe("in_recent", { status: "open" });
    inStripe("in_week", { status: "open" }, 7 * 86_400);
    const wrong = await reconcile([], { env: { STRIPE_API_KEY: "sk_test_otherkey123", STRIPE_API_BASE: fake.url } });
    expect(wrong.code).toBe(1);
    expect(wrong.err).toContain("Cannot reconcile invoices");
    expect(wrong.err).not.toContain("sk_test_otherkey123");
    expect((await reconcile(["--since", "1d", "--json"])).json().checked).toBe(1);
    const iso = new Date((NOW - 8 * 86_400) * 1000).toISOString();
    expect((await reconcile([`--since=${iso}`, "--json"])).json().checked).toBe(2);
  });
});

describe("reconcile invoices and the endpoint's mode (review R6)", () => {
  test("`reconcileInvoicesCommand()` --repair with a test-mode key against a live endpoint is refused (exit 2, naming the variables, never the key) and books nothing", async () => {
    inStripe("in_testmode", { status: "paid", amount_paid: 7700, amount_due: 7700 });
    const before = await snapshot();
    const run = await reconcile(["--repair"], { env: { ...ENV, STRIPE_MODE: "live" } });
    expect(run.code).toBe(2);
    expect(run.err).toContain("STRIPE_MODE=live contradicts STRIPE_API_KEY, a test-mode key");
    expect(run.err).not.toContain(KEY);
    expect(await snapshot()).toEqual(before);
    expect(store.requests.length).toBe(0); // refused before anything was read
    // The same key at a test endpoint (declared, or read from the key) repairs as before.
    expect((await reconcile(["--repair"], { env: { ...ENV, STRIPE_MODE: "test" } })).code).toBe(1);
    expect((await snapshot()).ledger.map((l) => [l.invoice_id, l.amount])).toEqual([["in_testmode", 7700]]);
  });

  test("`reconcileInvoicesCommand()` --repair records an object of the other mode ignored_mode, as a webhook of it would be, and applies nothing", async () => {
    inStripe("in_livemode", { status: "paid", amount_paid: 2000, livemode: true });
    const dry = await reconcile(["--repair", "--dry-run", "--json"]);
    expect(dry.json().drift[0]?.repair).toEqual({ key: "reconcile:in_livemode:paid:2000", outcome: "would_ignore_mode" });
    const run = await reconcile(["--repair", "--json"]);
    expect(run.code).toBe(1);
    expect(run.json().drift[0]?.repair).toMatchObject({ key: "reconcile:in_livemode:paid:2000", outcome: "ignored_mode" });
    const after = await snapshot();
    expect(after.inbox.map((r) => [r.event_id, r.outcome, r.source, r.parked])).toEqual([
      ["reconcile:in_livemode:paid:2000", "ignored_mode", "reconcile", false],
    ]);
    expect([after.invoices.length, after.ledger.length, after.outbox.length]).toEqual([0, 0, 0]); // nothing applied
    expect((await reconcile(["--repair", "--json"])).json().drift[0]?.repair?.outcome).toBe("duplicate");
  });
});

test("`bun run reconcile invoices` runs the command as a process: --json on stdout, exit 1 on drift", async () => {
  inStripe("in_cli", { status: "open" });
  const proc = Bun.spawn([process.execPath, "src/bin/reconcile.ts", "invoices", "--json"], {
    cwd: join(import.meta.dir, "..", ".."),
    env: { ...process.env, ...ENV, DATABASE_URL: fresh.url },
    stdout: "pipe",
    stderr: "pipe",
    timeout: 30_000, // a bound on a hung run, not a speed assertion
  });
  const [stdout] = await Promise.all([new Response(proc.stdout).text(), proc.exited]);
  expect(proc.exitCode).toBe(1);
  expect((JSON.parse(stdout) as Reconciliation).byClass).toEqual({ missing_locally: 1 });
});

test("`reconcile invoices --json` that fails (Stripe refuses the key) exits 1 and still prints a JSON document naming the failure, never the key", async () => {
  const wrongKey = "sk_test_wrongwrongwrong99";
  const r = await reconcile(["--json"], { env: { ...ENV, STRIPE_API_KEY: wrongKey } });
  expect(r.code).toBe(1);
  expect(JSON.parse(r.text)).toMatchObject({ kind: "invoices", failed: true, exitCode: 1 });
  expect(r.text + r.err).not.toContain(wrongKey);
});
