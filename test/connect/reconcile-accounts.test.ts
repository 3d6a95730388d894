// Reconcile and event backfill per connected account, against the fake Stripe API holding the same
// object ids under the platform and two connected accounts: every read made as the account chosen, a
// checkpoint per (endpoint, account), drift compared and repaired inside one account, and the
// receiver's mode and Connect checks on events read from the API.
import { afterAll, afterEach, beforeEach, describe, expect, setDefaultTimeout, test } from "bun:test";
import { connect, type Db } from "../../src/db/db.ts";
import { startFakeStripe, type RunningFakeStripe } from "../../src/dev/fake-stripe/serve.ts";
import { FakeStripeStore, type StoredObject } from "../../src/dev/fake-stripe/store.ts";
import { insertInbox } from "../../src/inbox/inbox.ts";
import { handlersFor } from "../../src/receiver/endpoints.ts";
import { runCatchUp } from "../../src/reconcile/catch-up.ts";
import { reconcileEventsCommand } from "../../src/reconcile/events-command.ts";
import { reconcileInvoicesCommand } from "../../src/reconcile/invoices-command.ts";
import type { Reconciliation } from "../../src/reconcile/reconcile-command.ts";
import { stripeEventLister } from "../../src/reconcile/stripe-events.ts";
import { stripeApiClient } from "../../src/stripe-api/client.ts";
import { backdateInbox, freshDatabase, invoice } from "../support/helpers.ts";
import { recentEvents } from "../reconcile/backfill-support.ts";

setDefaultTimeout(60_000);
const KEY = "sk_test_connectreconcile1";
const NOW = Math.floor(Date.now() / 1000);
const ACCOUNTS = ["", "acct_1A", "acct_1B"] as const;
const TAG: Record<string, string> = { "": "p", acct_1A: "a", acct_1B: "b" };
const fresh = await freshDatabase();
const db = fresh.db;
let fake: RunningFakeStripe;
afterAll(() => fresh.drop());
beforeEach(async () => {
  await db`truncate webhook_inbox, webhook_inbox_payloads, outbox, ledger_entries, invoices, stripe_charges, invoice_payments, refunds, disputes,
           stripe_change_claims, event_backfill_checkpoints`;
});
afterEach(() => fake?.stop());

/** A live or test Connect endpoint `connect` next to billing (both in the key's mode unless `mode` says). */
function env(key = KEY, extra: Record<string, string> = {}) {
  return { STRIPE_API_KEY: key, STRIPE_API_BASE: fake.url, STRIPE_ENDPOINTS: "connect", STRIPE_CONNECT_CONNECT: "true", ...extra };
}

/** The invoice-lifecycle and money-out events of `account`: same object ids everywhere, own event ids (Stripe's are unique). */
function eventsOf(account: string, baseSec = NOW - 3_600): StoredObject[] {
  return recentEvents(baseSec).map((e) => ({
    ...e,
    id: `${e.id}_${TAG[account]}`,
    ...(account === "" ? {} : { account }),
  }));
}

/** A fake Stripe whose platform and both accounts hold their events (and whose /v1/accounts lists the two). */
function fakeWithAccounts(key = KEY): FakeStripeStore {
  const store = new FakeStripeStore(key);
  for (const account of ACCOUNTS) for (const e of eventsOf(account)) store.putEvent(e, true, account);
  fake = startFakeStripe({ store });
  return store;
}

/** Runs `reconcile events` in-process on its own connection; output captured. */
async function events(args: string[], environment = env()) {
  const out: string[] = [];
  const err: string[] = [];
  const code = await reconcileEventsCommand(args, environment, {
    openDb: async () => {
      const own = connect(fresh.url, { max: 1 });
      return { db: own, close: () => own.end({ timeout: 5 }) };
    },
    out: (l) => out.push(l),
    err: (l) => err.push(l),
    retry: { baseMs: 1, maxMs: 2 },
  });
  return { code, out, err: err.join("\n") };
}

/** Runs `reconcile invoices` in-process on its own connection; `--json` parsed. */
async function invoices(args: string[]) {
  const out: string[] = [];
  const err: string[] = [];
  const code = await reconcileInvoicesCommand([...args, "--json"], env(), {
    openDatabase: async () => {
      const own = connect(fresh.url, { max: 1 });
      return { db: own, close: () => own.end({ timeout: 5 }) };
    },
    out: (l) => out.push(l),
    err: (l) => err.push(l),
    retry: { baseMs: 1, maxMs: 2 },
    pageSize: 2,
  });
  return { code, err: err.join("\n"), report: JSON.parse(out.join("\n")) as Reconciliation };
}

const checkpoints = () =>
  db<{ endpoint: string; account: string; cursor_event_id: string; cursor_created: Date }[]>`
    select endpoint, account, cursor_event_id, cursor_created from event_backfill_checkpoints order by endpoint, account`;

describe("`reconcile events` per account", () => {
  test("`reconcileEventsCommand()` with --account reads only that account (every request), records under it with one checkpoint", async () => {
    const store = fakeWithAccounts();
    const run = await events(["--account", "acct_1A"]);
    expect(run.err).toBe("");
    expect(run.code).toBe(0);
    const n = eventsOf("acct_1A").length;
    const reads = store.requests.filter((r) => r.path.startsWith("/v1/"));
    expect(reads.length).toBeGreaterThan(0);
    expect(new Set(reads.map((r) => `${r.path} ${r.account}`))).toEqual(new Set(["/v1/events acct_1A"]));
    // Only the Connect endpoint reads a connected account; billing (not Connect) is left alone.
    const rows = await db`
      select endpoint, account, count(*)::int as n, (count(*) filter (where needs_review_at is not null))::int as parked
        from webhook_inbox group by 1, 2`;
    expect([...rows]).toEqual([{ endpoint: "connect", account: "acct_1A", n, parked: 0 }]);
    expect((await checkpoints()).map((c) => [c.endpoint, c.account])).toEqual([["connect", "acct_1A"]]);
    expect([...(await db`select distinct account from invoices`)]).toEqual([{ account: "acct_1A" }]);
    expect(run.out[0]).toStartWith(`connect (acct_1A): ${n} event(s)`);
  });

  test("`reconcileEventsCommand()` with --all-accounts covers the platform and both accounts, a checkpoint each; a second run reads from each checkpoint", async () => {
    const store = fakeWithAccounts();
    const first = await events(["--all-accounts", "--endpoint", "connect"]);
    expect(first.err).toBe("");
    expect(first.code).toBe(0);
    expect(store.requests.filter((r) => r.path === "/v1/accounts").map((r) => r.account)).toEqual([""]);
    const accountsRead = new Set(store.requests.filter((r) => r.path === "/v1/events").map((r) => r.account));
    expect(accountsRead).toEqual(new Set(ACCOUNTS));
    const cps = await checkpoints();
    expect(cps.map((c) => [c.endpoint, c.account, c.cursor_event_id])).toEqual(ACCOUNTS.map((a) => ["connect", a, eventsOf(a).at(-1)!.id]));
    const rows = await db<{ account: string; n: number }[]>`select account, count(*)::int as n from webhook_inbox group by 1 order by 1`;
    expect([...rows]).toEqual(ACCOUNTS.map((a) => ({ account: a, n: eventsOf(a).length })));
    // The same invoice ids, one row per account.
    const perAccount = await db<{ account: string; n: number }[]>`select account, count(*)::int as n from invoices group by 1 order by 1`;
    expect(perAccount.map((r) => r.account)).toEqual([...ACCOUNTS]);
    expect(new Set(perAccount.map((r) => r.n)).size).toBe(1);

    // One more event of acct_1B only; the second run starts each account at its own checkpoint.
    const late = { ...eventsOf("acct_1B")[0]!, id: "evt_late_b", created: NOW - 60 };
    store.putEvent(late, true, "acct_1B");
    store.requests.length = 0;
    const second = await events(["--all-accounts", "--endpoint", "connect"]);
    expect(second.code).toBe(0);
    for (const cp of cps) {
      const firstCall = store.requests.find((r) => r.path === "/v1/events" && r.account === cp.account)!;
      // OVERLAP_SEC (300 s) before the checkpoint's cursor: where that account's run left off, not 3 days ago.
      expect(Number(firstCall.query["created[lt]"])).toBe(Math.floor(cp.cursor_created.getTime() / 1000) - 300);
    }
    expect(second.out.find((l) => l.startsWith("connect (acct_1B):"))).toContain("recorded 1 new");
    expect(second.out.find((l) => l.startsWith("connect (acct_1A):"))).toContain("recorded 0 new");
    expect(second.out.find((l) => l.startsWith("connect:"))).toContain("recorded 0 new");
    const [b] = await db`select cursor_event_id from event_backfill_checkpoints where endpoint = 'connect' and account = 'acct_1B'`;
    expect(b!.cursor_event_id).toBe("evt_late_b");
    const [lateRow] = await db`select account from webhook_inbox where event_id = 'evt_late_b'`;
    expect(lateRow!.account).toBe("acct_1B");
  });

  test("`reconcileEventsCommand()` at a live endpoint records a test-mode event listed for an account `ignored_mode`, never applied", async () => {
    const live = "sk_live_connectreconcile1";
    const store = new FakeStripeStore(live);
    for (const e of eventsOf("acct_1A")) store.putEvent(e, true, "acct_1A"); // livemode false, as the fixtures
    store.putEvent({ ...eventsOf("acct_1A")[0]!, id: "evt_live_a", livemode: true, created: NOW - 120 }, true, "acct_1A");
    fake = startFakeStripe({ store });
    const run = await events(["--account", "acct_1A"], env(live));
    expect(run.code).toBe(0);
    const n = eventsOf("acct_1A").length;
    const rows = await db<{ outcome: string; n: number }[]>`
      select outcome, count(*)::int as n from webhook_inbox where account = 'acct_1A' and event_id <> 'evt_live_a' group by 1`;
    expect([...rows]).toEqual([{ outcome: "ignored_mode", n }]);
    expect(run.out[0]).toContain(`other mode ${n}`);
    const [liveRow] = await db`select outcome from webhook_inbox where event_id = 'evt_live_a'`;
    expect(liveRow!.outcome).toBe("processed");
    // Only the live event's invoice was touched: nothing of the test-mode events was applied.
    expect([...(await db`select count(*)::int as n from ledger_entries`)]).toEqual([{ n: 0 }]);
    expect((await db`select count(*)::int as n from invoices`)[0]!.n).toBe(1);
    expect((await checkpoints()).map((c) => c.cursor_event_id)).toEqual(["evt_live_a"]);
  });

  test("`reconcileEventsCommand()` --account at a non-Connect endpoint named with --endpoint parks the handled events (needs review), as a webhook delivery", async () => {
    const store = fakeWithAccounts();
    const run = await events(["--account", "acct_1A", "--endpoint", "billing"]);
    expect(run.code).toBe(0);
    const handled = eventsOf("acct_1A").filter((e) => Object.hasOwn(handlersFor("stripe")!, String(e.type))).length;
    const rows = await db<{ parked: boolean; outcome: string | null; n: number }[]>`
      select needs_review_at is not null as parked, outcome, count(*)::int as n from webhook_inbox
       where endpoint = 'billing' and account = 'acct_1A' group by 1, 2 order by 1`;
    expect([...rows]).toEqual([
      { parked: false, outcome: "ignored", n: eventsOf("acct_1A").length - handled },
      { parked: true, outcome: null, n: handled },
    ]);
    expect([...(await db`select count(*)::int as n from invoices`)]).toEqual([{ n: 0 }]);
    expect(store.requests.every((r) => r.account === "acct_1A")).toBe(true);
  });

  test("`reconcileEventsCommand()` refuses a malformed --account, both options at once, and --account without a Connect endpoint (exit 2, nothing read)", async () => {
    const store = fakeWithAccounts();
    const bad = await events(["--account", "cus_123"]);
    expect(bad.code).toBe(2);
    expect(bad.err).toStartWith("--account must be a connected account id (acct_…)");
    const both = await events(["--account", "acct_1A", "--all-accounts"]);
    expect(both.code).toBe(2);
    expect(both.err).toStartWith("--account and --all-accounts exclude each other");
    const noConnect = await events(["--account", "acct_1A"], env(KEY, { STRIPE_CONNECT_CONNECT: "false" }));
    expect(noConnect.code).toBe(2);
    expect(noConnect.err).toStartWith("No endpoint is declared Connect (billing, connect)");
    expect(store.requests.length).toBe(0);
    expect([...(await db`select count(*)::int as n from webhook_inbox`)]).toEqual([{ n: 0 }]);
  });
});

describe("the catch-up per account", () => {
  test("`runCatchUp()` covers the platform and the accounts a Connect endpoint knows (inbox rows, checkpoints), each with its own checkpoint", async () => {
    const store = fakeWithAccounts();
    for (const e of eventsOf("acct_1C")) store.putEvent(e, true, "acct_1C"); // listed by /v1/accounts, never seen here
    // acct_1A delivered a webhook once; acct_1B was backfilled once (a checkpoint row, no inbox row).
    await insertInbox(db, [
      {
        key: { provider: "stripe", endpoint: "connect", eventId: "evt_seen_a" },
        type: "plan.created",
        payload: "{}",
        rawBody: null,
        replaced: null,
        source: "webhook",
        createdAtSec: null,
        account: "acct_1A",
        livemode: false,
        settled: "ignored",
        traceparent: null,
      },
    ]);
    await backdateInbox(db, "evt_seen_a", 3_600_000);
    await db`insert into event_backfill_checkpoints (provider, endpoint, account) values ('stripe', 'connect', 'acct_1B')`;
    const controller = new AbortController();
    const log: Record<string, unknown>[] = [];
    await runCatchUp({
      db,
      list: stripeEventLister(stripeApiClient({ apiKey: KEY, apiBase: new URL(fake.url) }), {}, { sleep: async () => {} }),
      endpoints: [
        {
          target: { provider: "stripe", endpoint: "connect", handlers: handlersFor("stripe")! },
          mode: "sync",
          backoff: { baseMs: 1_000, capMs: 600_000 },
          livemode: false,
          connect: true,
        },
      ],
      idleAfterMs: 60_000,
      signal: controller.signal,
      log: (line) => log.push(line),
    });
    expect(new Set(store.requests.filter((r) => r.path === "/v1/events").map((r) => r.account))).toEqual(new Set(ACCOUNTS));
    expect(store.requests.some((r) => r.path === "/v1/accounts")).toBe(false);
    expect((await checkpoints()).map((c) => [c.account, c.cursor_event_id])).toEqual(ACCOUNTS.map((a) => [a, eventsOf(a).at(-1)!.id]));
    expect(log.map((l) => l.account ?? "")).toEqual([...ACCOUNTS]);
  });
});

describe("`reconcile invoices` per account", () => {
  /** The same invoice id paid at Stripe under all three accounts; open locally under all three. */
  async function sameInvoiceEverywhere(): Promise<FakeStripeStore> {
    const store = new FakeStripeStore(KEY);
    for (const account of ACCOUNTS) {
      const object = invoice({ id: "in_same", created: NOW - 60, livemode: false, status: "paid", amount_paid: 2000 });
      store.put("invoices", object as StoredObject, account);
      await db`insert into invoices (account, id, customer_id, status, currency, amount_due, amount_paid)
               values (${account}, 'in_same', 'cus_test_1', 'open', 'usd', 2000, 0)`;
    }
    fake = startFakeStripe({ store });
    return store;
  }

  test("`reconcileInvoicesCommand()` --account --repair finds and repairs drift under that account only", async () => {
    const store = await sameInvoiceEverywhere();
    const run = await invoices(["--account", "acct_1A", "--repair"]);
    expect(run.code).toBe(1);
    expect(run.report.accounts).toEqual(["acct_1A"]);
    expect(run.report.drift.map((d) => [d.account, d.id, d.drift, d.repair?.outcome])).toEqual([
      ["acct_1A", "in_same", "payment_missing", "repaired"],
    ]);
    expect(store.requests.map((r) => `${r.path} ${r.account}`)).toEqual(["/v1/invoices acct_1A"]);
    const states = await db`select account, status from invoices order by account`;
    expect([...states]).toEqual([
      { account: "", status: "open" },
      { account: "acct_1A", status: "paid" },
      { account: "acct_1B", status: "open" },
    ]);
    expect([...(await db`select account, kind, amount::int from ledger_entries`)]).toEqual([
      { account: "acct_1A", kind: "payment", amount: 2000 },
    ]);
    const [repair] = await db`select event_id, account, source from webhook_inbox`;
    expect(repair).toEqual({ event_id: "reconcile:acct_1A:in_same:paid:2000", account: "acct_1A", source: "reconcile" });
  });

  test("`reconcileInvoicesCommand()` --all-accounts compares each account's invoices with its own rows", async () => {
    const store = await sameInvoiceEverywhere();
    await db`update invoices set status = 'paid', amount_paid = 2000 where account = 'acct_1A'`;
    await db`insert into ledger_entries (account, invoice_id, kind, amount, currency, event_id)
             values ('acct_1A', 'in_same', 'payment', 2000, 'usd', 'evt_old')`;
    const run = await invoices(["--all-accounts"]);
    expect(run.code).toBe(1);
    expect(run.report.accounts).toEqual(["", "acct_1A", "acct_1B"]);
    expect(run.report.checked).toBe(3);
    expect(run.report.drift.map((d) => [d.account, d.drift])).toEqual([
      ["", "payment_missing"],
      ["acct_1B", "payment_missing"],
    ]);
    expect(new Set(store.requests.filter((r) => r.path === "/v1/invoices").map((r) => r.account))).toEqual(new Set(ACCOUNTS));
    expect([...(await db`select count(*)::int as n from webhook_inbox`)]).toEqual([{ n: 0 }]);
  });
});
