// Stripe Connect: one endpoint receiving two connected accounts' events (the same object ids under both)
// in both modes, shuffled and duplicated, in every processing mode; reads for an account made as that
// account (the fake answers only that account's objects); the configuration refusals.
import { afterAll, afterEach, beforeEach, describe, expect, test } from "bun:test";
import { ConfigError, loadConfig } from "../../src/config.ts";
import { createApp } from "../../src/receiver/app.ts";
import { handlerTables, stripeEndpoints, workerHandlerTables } from "../../src/receiver/endpoints.ts";
import type { Mode } from "../../src/receiver/receive.ts";
import { inboxStatus } from "../../src/ops/status.ts";
import { mulberry32, shuffleInPlace } from "../../src/dev/random.ts";
import { startFakeStripe, type RunningFakeStripe } from "../../src/dev/fake-stripe/serve.ts";
import { FakeStripeStore } from "../../src/dev/fake-stripe/store.ts";
import { stripeFetcher } from "../../src/worker/stripe-fetch.ts";
import { stripeApiClient } from "../../src/stripe-api/client.ts";
import { claimBatch } from "../../src/worker/claim.ts";
import { processClaim } from "../../src/worker/process-claim.ts";
import { count, eventBody, freshDatabase, invoice, lifecycle, OTHER_SECRET, SECRET, signedRequest } from "../support/helpers.ts";
import { MONEY_OUT_END_STATE, moneyOut } from "../support/money-out.ts";
import { thinFromClassic } from "../support/thin.ts";
import { workOff } from "../support/work.ts";
import type { Db } from "../../src/db/db.ts";

const fresh = await freshDatabase();
const db = fresh.db;
afterAll(() => fresh.drop());
beforeEach(async () => {
  await db`truncate webhook_inbox, outbox, ledger_entries, invoices, stripe_charges, invoice_payments, refunds, disputes, stripe_change_claims`;
});

const URL_CONNECT = "http://receiver.test/webhooks/stripe/connect";

/**
 * A fixture event as a connected account's (or the platform's, `account` ""): `account` set, `livemode`
 * set, its id suffixed with `tag` so each copy is its own Stripe event; the object ids stay the same.
 */
function asAccount(body: string, account: string, livemode: boolean, tag: string): string {
  const event = JSON.parse(body) as Record<string, unknown>;
  event.id = `${String(event.id)}_${tag}`;
  event.livemode = livemode;
  if (account === "") delete event.account;
  else event.account = account;
  return JSON.stringify(event, null, 2);
}

/** One account's money-out state (MONEY_OUT_END_STATE's shape, the inbox aside). */
async function accountState(account: string) {
  const [invoices, ledger, refunds, disputes, net, outbox] = await Promise.all([
    db`select id, status from invoices where account = ${account} order by id`,
    db`select invoice_id, kind, amount::int, currency, balance_transaction from ledger_entries_linked where account = ${account}
        order by invoice_id, kind, balance_transaction`,
    db`select id, status from refunds where account = ${account} order by id`,
    db`select id, status from disputes where account = ${account} order by id`,
    db`select invoice_id, currency, paid::int, refunded::int, dispute_withdrawn::int, dispute_fees::int, dispute_reinstated::int, net::int
         from invoice_net where account = ${account} order by invoice_id`,
    db`select event_type, count(*)::int as n from outbox where account = ${account} group by 1 order by 1`,
  ]);
  return { invoices, ledger, refunds, disputes, net, outbox };
}
const { inbox: _inbox, ...END } = MONEY_OUT_END_STATE;

async function post(app: ReturnType<typeof createApp>, body: string, secret = SECRET, url = URL_CONNECT): Promise<string> {
  const res = await app.fetch(await signedRequest(url, body, { secret }));
  const answer = (await res.json()) as { outcome?: string; error?: string };
  expect({ status: res.status, error: answer.error }).toEqual({ status: 200, error: undefined });
  return answer.outcome ?? "";
}

describe("a live Connect endpoint", () => {
  for (const mode of ["sync", "async", "hybrid"] as Mode[]) {
    test(`\`createApp()\` (${mode}) books two accounts' same ids apart and no test-mode event, shuffled and duplicated`, async () => {
      const app = createApp({
        log: () => {},
        db,
        endpoints: stripeEndpoints([{ name: "connect", secrets: [SECRET], mode, livemode: true, connect: true }]),
      });
      const bodies = moneyOut().flatMap((e) => [
        asAccount(e.body, "acct_1A", true, "a"),
        asAccount(e.body, "acct_1B", true, "b"),
        asAccount(e.body, "acct_1A", false, "at"), // test mode of a live account's ids: must never book
        asAccount(e.body, "acct_1C", false, "ct"),
      ]);
      const deliveries = [...bodies, ...bodies];
      shuffleInPlace(deliveries, mulberry32(21));
      const outcomes = await Promise.all(deliveries.map((b) => post(app, b)));
      expect(outcomes.filter((o) => o === "ignored_mode").length).toBe(40);
      expect(outcomes.filter((o) => o === "duplicate").length).toBe(80);
      if (mode === "async") {
        let rounds = 0;
        while ((await count(db, "webhook_inbox", "processed_at is null and needs_review_at is null")) > 0 && rounds++ < 10)
          await workOff(db, handlerTables.stripe);
      }
      expect(await accountState("acct_1A")).toEqual(END as never);
      expect(await accountState("acct_1B")).toEqual(END as never);
      expect(await count(db, "invoices", "account not in ('acct_1A', 'acct_1B')")).toBe(0);
      expect(await count(db, "ledger_entries", "account not in ('acct_1A', 'acct_1B')")).toBe(0);
      expect(await count(db, "outbox", "account not in ('acct_1A', 'acct_1B')")).toBe(0);
      // Every test-mode event is recorded (dedup and audit), settled ignored_mode, with its account.
      const rows = await db<{ account: string; outcome: string; n: number }[]>`
        select account, outcome, count(*)::int as n from webhook_inbox group by 1, 2 order by 1, 2`;
      expect([...rows]).toEqual([
        { account: "acct_1A", outcome: "ignored_mode", n: 20 },
        { account: "acct_1A", outcome: "processed", n: 20 },
        { account: "acct_1B", outcome: "processed", n: 20 },
        { account: "acct_1C", outcome: "ignored_mode", n: 20 },
      ]);
      const status = await inboxStatus(db);
      expect(status.arrivals.filter((a) => a.endpoint === "connect").reduce((n, a) => n + a.ignoredMode, 0)).toBe(40);
    });
  }

  test("`createApp()` on a non-Connect endpoint parks a connected account's event (200 needs_review) and books the platform's", async () => {
    const app = createApp({ log: () => {}, db, endpoints: stripeEndpoints([{ name: "connect", secrets: [SECRET], livemode: false }]) });
    const [created] = lifecycle();
    expect(await post(app, asAccount(created!.body, "acct_1A", false, "a"))).toBe("needs_review");
    expect(await post(app, asAccount(created!.body, "", false, "p"))).toBe("processed");
    expect(await post(app, asAccount(created!.body, "", true, "live"))).toBe("ignored_mode");
    const [parked] = await db<{ account: string; last_error: string }[]>`
      select account, last_error from webhook_inbox where needs_review_at is not null`;
    expect(parked?.account).toBe("acct_1A");
    expect(parked?.last_error).toContain("not declared Connect");
    expect([...(await db`select account, id from invoices`)]).toEqual([{ account: "", id: "in_1SkA1pLgUG5tbmjcQ7nB2vXa" }]);
  });

  test("`createApp()` without a mode accepts both modes (the old behaviour of a non-Connect endpoint)", async () => {
    const app = createApp({ log: () => {}, db, endpoints: stripeEndpoints([{ name: "connect", secrets: [SECRET] }]) });
    const [created] = lifecycle();
    expect(await post(app, asAccount(created!.body, "", true, "l"))).toBe("processed");
    expect(await post(app, asAccount(created!.body, "", false, "t"))).toBe("processed");
  });
});

describe("reads for a connected account", () => {
  const KEY = "sk_test_connectconnect123";
  let fake: RunningFakeStripe;
  beforeEach(() => {
    fake = startFakeStripe({ store: new FakeStripeStore(KEY) });
  });
  afterEach(() => fake.stop());

  const work = (database: Db) =>
    claimBatch(database, { limit: 50, leaseMs: 60_000, maxAttempts: 5 }).then(async (claims) => {
      const fetcher = stripeFetcher({
        stripe: stripeApiClient({ apiKey: KEY, apiBase: new URL(fake.url) }),
        refetchEndpoints: new Set(["connect"]),
        requestsPerSecond: 1_000,
        retry: { attempts: 1, baseMs: 1, maxMs: 1 },
      });
      const out: string[] = [];
      for (const claim of claims)
        out.push(
          (
            await processClaim(database, claim, {
              tables: workerHandlerTables(true),
              timeoutMs: 5_000,
              maxAttempts: 5,
              backoff: { baseMs: 1, capMs: 1 },
              fetcher,
            })
          ).outcome,
        );
      return out.sort();
    });

  test("refetch reads each account's invoice with its Stripe-Account and never another's", async () => {
    fake.store.put("invoices", { ...invoice({ id: "in_same", status: "paid", amount_due: 700, amount_paid: 700 }), created: 1 } as never, "acct_1A");
    fake.store.put("invoices", { ...invoice({ id: "in_same", status: "open", amount_due: 900, amount_paid: 0 }), created: 1 } as never, "acct_1B");
    const app = createApp({
        log: () => {},
      db,
      endpoints: stripeEndpoints([{ name: "connect", secrets: [SECRET], mode: "async", livemode: false, connect: true }]),
    });
    const stale = invoice({ id: "in_same", status: "draft", amount_due: 1, amount_paid: 0 });
    const body = (id: string, account: string) =>
      JSON.stringify({ ...(JSON.parse(eventBody(id, "invoice.created", stale)) as object), account, livemode: false });
    expect(await post(app, body("evt_conn_a", "acct_1A"))).toBe("queued");
    expect(await post(app, body("evt_conn_b", "acct_1B"))).toBe("queued");
    expect(await post(app, body("evt_conn_c", "acct_1C"))).toBe("queued"); // the fake holds no in_same for acct_1C
    expect(await work(db)).toEqual(["object_missing", "processed", "processed"]);
    const reads = fake.store.requests.filter((r) => r.path === "/v1/invoices/in_same").map((r) => `${r.account} ${r.status}`);
    expect(reads.sort()).toEqual(["acct_1A 200", "acct_1B 200", "acct_1C 404"]);
    expect([...(await db`select account, status, amount_due::int from invoices order by account`)]).toEqual([
      { account: "acct_1A", status: "draft", amount_due: 700 },
      { account: "acct_1B", status: "draft", amount_due: 900 },
    ]);
  });

  test("a thin notification's fetch is made in its context (the account) and applied under it", async () => {
    const [created] = lifecycle();
    const object = (JSON.parse(created!.body) as { data: { object: Record<string, unknown> } }).data.object;
    fake.store.put("invoices", { ...object, created: 1 } as never, "acct_1B");
    const app = createApp({
        log: () => {},
      db,
      endpoints: stripeEndpoints([{ name: "thin", secrets: [OTHER_SECRET], kind: "thin", livemode: false, connect: true }]),
    });
    const thin = { ...thinFromClassic(created!.body, "evt_test_conn_thin_1"), context: "acct_1B" };
    expect(await post(app, JSON.stringify(thin), OTHER_SECRET, "http://receiver.test/webhooks/stripe/thin")).toBe("queued");
    expect(await work(db)).toEqual(["processed"]);
    const reads = fake.store.requests.filter((r) => r.path.startsWith("/v1/invoices/"));
    expect(reads.map((r) => [r.account, r.status])).toEqual([["acct_1B", 200]]);
    expect([...(await db`select account, id, status from invoices`)]).toEqual([
      { account: "acct_1B", id: String(object.id), status: "draft" },
    ]);
    expect([...(await db`select account from webhook_inbox`)]).toEqual([{ account: "acct_1B" }]);
  });
});

describe("configuration", () => {
  const base = { STRIPE_WEBHOOK_SECRET: SECRET, DATABASE_URL: "postgres://u:p@127.0.0.1:5432/d" };
  const problems = (env: Record<string, string>) => {
    try {
      loadConfig({ ...base, ...env });
      return [];
    } catch (err) {
      if (!(err instanceof ConfigError)) throw err;
      return err.problems;
    }
  };

  test("`loadConfig()` refuses a declared mode that contradicts the API key", () => {
    expect(problems({ STRIPE_MODE: "live", STRIPE_API_KEY: "sk_test_abcdefgh12" })).toEqual([
      "STRIPE_MODE=live contradicts STRIPE_API_KEY, a test-mode key: set one mode for both",
    ]);
  });

  test("`loadConfig()` refuses a Connect endpoint without a mode, and derives one from the key", () => {
    expect(problems({ STRIPE_ENDPOINTS: "connect", STRIPE_WEBHOOK_SECRET_CONNECT: OTHER_SECRET, STRIPE_CONNECT_CONNECT: "true" })).toEqual([
      "STRIPE_CONNECT_CONNECT=true needs a mode: set STRIPE_MODE_CONNECT=live or test (or a STRIPE_API_KEY sk_live_/sk_test_): a Connect endpoint receives both modes with one secret",
    ]);
    const config = loadConfig({
      ...base,
      STRIPE_API_KEY: "rk_live_abcdefgh12",
      STRIPE_ENDPOINTS: "connect",
      STRIPE_WEBHOOK_SECRET_CONNECT: OTHER_SECRET,
      STRIPE_CONNECT_CONNECT: "true",
    });
    expect(config.endpoints.map((e) => [e.name, e.livemode, e.connect ?? false])).toEqual([
      ["billing", true, false],
      ["connect", true, true],
    ]);
    expect(problems({ STRIPE_MODE: "sandbox" })).toEqual(['STRIPE_MODE must be live or test, got "sandbox"']);
  });

  test("`loadConfig()` leaves an endpoint without a declared or derivable mode open to both", () => {
    expect(loadConfig(base).endpoints[0]?.livemode).toBeUndefined();
  });
});
