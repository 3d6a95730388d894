// The failover watch of serve and worker on one real database: a primary change is staged by giving the
// database a row of another primary seen last a moment ago (what a promoted standby holds of the old one).
// Connected accounts' backfill (R4 of the fcab188 review) and a failover nobody serves made visible (R8).
import { afterEach, beforeEach, expect, setDefaultTimeout, test } from "bun:test";
import { join } from "node:path";
import { loadConfig } from "../../src/config.ts";
import type { Db } from "../../src/db/db.ts";
import { startFakeStripe, type RunningFakeStripe } from "../../src/dev/fake-stripe/serve.ts";
import { FakeStripeStore, type StoredObject } from "../../src/dev/fake-stripe/store.ts";
import { insertInbox } from "../../src/inbox/inbox.ts";
import { inboxStatus } from "../../src/ops/status.ts";
import { reconcileEventsCommand } from "../../src/reconcile/events-command.ts";
import { readCatchUpSettings } from "../../src/runtime/catch-up.ts";
import { startFailoverWatch } from "../../src/runtime/failover.ts";
import { receiverApp } from "../../src/runtime/receiver.ts";
import { ADMIN_TOKEN, basic } from "../admin/admin-server.ts";
import { eventBody, freshDatabase, invoice, SECRET } from "../support/helpers.ts";
import { waitUntil } from "../support/wait-until.ts";

setDefaultTimeout(30_000);
const API_KEY = "sk_test_failoverwatch0001";
const NOW_SEC = Math.floor(Date.now() / 1000);
let database: Awaited<ReturnType<typeof freshDatabase>>;
let db: Db;
let fake: RunningFakeStripe;
let store: FakeStripeStore;

beforeEach(async () => {
  database = await freshDatabase();
  db = database.db;
  store = new FakeStripeStore(API_KEY);
  fake = startFakeStripe({ store });
});
afterEach(async () => {
  await fake.stop();
  await database.drop();
});

/** The old primary as the promoted standby holds it: this cluster's system identifier on timeline 0, seen 5 s ago. */
async function stageFailover(): Promise<void> {
  await db`
    insert into database_primaries (system_identifier, timeline_id, last_seen_at)
    select system_identifier, 0, now() - interval '5 seconds' from pg_control_system()
  `;
}

/** An `invoice.paid` Stripe still lists, created a minute ago: acknowledged on the old primary, lost with it. */
function lostPayment(id: string, account = ""): StoredObject {
  const paid = invoice({ id: `in_${id}`, amount_paid: 5000, amount_due: 5000, status: "paid" });
  return { ...JSON.parse(eventBody(id, "invoice.paid", paid)), created: NOW_SEC - 60, livemode: false, ...(account ? { account } : {}) };
}

/** Runs the failover watch on `env` until `done()` holds, checking every 50 ms; returns its log lines. */
async function watchUntil(env: Record<string, string>, what: string, done: () => Promise<boolean>): Promise<Record<string, unknown>[]> {
  const log: Record<string, unknown>[] = [];
  const stop = new AbortController();
  const watch = startFailoverWatch(env, { checkEveryMs: 50, marginMs: 3_600_000 }, readCatchUpSettings(env), db, stop.signal, (l) =>
    log.push(l),
  );
  try {
    await waitUntil(what, done);
  } finally {
    stop.abort();
    await watch;
  }
  return log;
}

test("`startFailoverWatch()` at a Connect endpoint backfills each known connected account too: its event lost with the old primary is recorded under it", async () => {
  // acct_A delivered before the loss (its row replicated); its payment a minute ago did not survive.
  await insertInbox(db, [
    {
      key: { provider: "stripe", endpoint: "billing", eventId: "evt_connect_earlier" },
      type: "customer.created",
      payload: "{}",
      rawBody: null,
      replaced: null,
      source: "webhook",
      createdAtSec: NOW_SEC - 86_400,
      account: "acct_A",
      livemode: false,
      settled: "processed",
      traceparent: null,
    },
  ]);
  store.putEvent(lostPayment("evt_connect_lost", "acct_A"), true, "acct_A");
  await stageFailover();
  const env = {
    STRIPE_CONNECT: "true",
    STRIPE_MODE: "test",
    STRIPE_API_KEY: API_KEY,
    STRIPE_API_BASE: fake.url,
    RECONCILE_IDLE_AFTER: "1h",
  };
  const recorded = async () =>
    (await db`select 1 from webhook_inbox where event_id = 'evt_connect_lost' and account = 'acct_A'`).length === 1 &&
    (await db`select 1 from event_backfill_requests where finished_at is null`).length === 0;
  await watchUntil(env, "the connected account's lost event recorded", recorded);
  expect([...(await db`select account, finished_at is not null as finished from event_backfill_requests order by account`)]).toEqual([
    { account: "", finished: true },
    { account: "acct_A", finished: true },
  ]);
  expect([...(await db`select account, invoice_id, amount::int from ledger_entries`)]).toEqual([
    { account: "acct_A", invoice_id: "in_evt_connect_lost", amount: 5000 },
  ]);
});

test("`startFailoverWatch()` without STRIPE_API_KEY leaves its request waiting in `inbox status`, /admin and /metrics, and the command they name finishes it", async () => {
  store.putEvent(lostPayment("evt_platform_lost"));
  await stageFailover();
  const log = await watchUntil(
    {},
    "the failover's backfill request",
    async () => (await db`select 1 from event_backfill_requests`).length > 0,
  );
  const since = (await db<{ since: Date }[]>`select window_start as since from event_backfill_requests`)[0]!.since.toISOString();
  expect(log).toEqual([
    expect.objectContaining({
      failover: "primary changed",
      requests: 1,
      see: `bun run reconcile events --since ${since} (event catch-up is off)`,
    }),
  ]);
  const command = `bun run reconcile events --endpoint billing --since ${since}`;

  // Nothing serves it: it waits, and every view shows it with that command.
  expect((await inboxStatus(db)).backfillRequests).toEqual([
    { endpoint: "billing", requests: 1, since, oldestAgeSec: expect.any(Number), command },
  ]);
  const printed = await inboxCli(["status"]);
  expect(printed).toContain("backfill requests not finished");
  expect(printed).toContain(command);
  const app = receiverApp(loadConfig({ DATABASE_URL: database.url, STRIPE_WEBHOOK_SECRET: SECRET, ADMIN_TOKEN }), db, { log: () => {} });
  const page = await (await app.fetch(new Request("http://x/admin", { headers: { authorization: basic() } }))).text();
  expect(page).toMatch(/<b>1<\/b>backfill request\(s\) unfinished, oldest \d+ s:/);
  expect(page).toContain(`<code>${command}</code>`);
  const metrics = async () => (await (await app.fetch(new Request("http://x/metrics"))).text()).split("\n");
  expect(await metrics()).toContain("webhook_backfill_requests_unfinished 1");
  expect((await metrics()).find((l) => l.startsWith("webhook_backfill_request_oldest_age_seconds "))).not.toBe(
    "webhook_backfill_request_oldest_age_seconds 0",
  );

  // The command, with a key: the lost event is recorded and applied, the request finished.
  const out: string[] = [];
  const code = await reconcileEventsCommand(
    command.split(" ").slice(4),
    { STRIPE_API_KEY: API_KEY, STRIPE_API_BASE: fake.url },
    { openDb: async () => ({ db, close: async () => {} }), out: (l) => out.push(l), err: (l) => out.push(l) },
  );
  expect({ code, out: out.join("\n") }).toMatchObject({ code: 0 });
  expect([...(await db`select account, invoice_id, amount::int from ledger_entries`)]).toEqual([
    { account: "", invoice_id: "in_evt_platform_lost", amount: 5000 },
  ]);
  expect([...(await db`select finished_at is not null as finished from event_backfill_requests`)]).toEqual([{ finished: true }]);
  expect((await inboxStatus(db)).backfillRequests).toEqual([]);
  expect(await metrics()).toContain("webhook_backfill_requests_unfinished 0");
  expect(await metrics()).toContain("webhook_backfill_request_oldest_age_seconds 0");
});

test("`reconcile events` finishes only the requests its run covered: not one a --types run read, nor one starting before its --since", async () => {
  const request = (name: string, start: string) => db`
    insert into event_backfill_requests (endpoint, requested_by, window_start, window_end)
    values ('billing', ${name}, now() - ${start}::interval, now() - interval '1 minute')`;
  await request("from 2 h ago", "2 hours");
  await request("from 30 min ago", "30 minutes");
  const run = (args: string[]) =>
    reconcileEventsCommand(
      ["--endpoint", "billing", ...args],
      { STRIPE_API_KEY: API_KEY, STRIPE_API_BASE: fake.url },
      { openDb: async () => ({ db, close: async () => {} }), out: () => {}, err: () => {} },
    );
  const unfinished = async () =>
    (await db<{ requested_by: string }[]>`select requested_by from event_backfill_requests where finished_at is null order by id`).map(
      (r) => r.requested_by,
    );
  expect(await run(["--since", "3h", "--types", "invoice.paid"])).toBe(0);
  expect(await run(["--since", "1h", "--dry-run"])).toBe(0);
  expect(await unfinished()).toEqual(["from 2 h ago", "from 30 min ago"]);
  expect(await run(["--since", "1h"])).toBe(0);
  expect(await unfinished()).toEqual(["from 2 h ago"]);
});

/** `bun src/bin/inbox.ts …args` on this test's database; its stdout (exit 0 required). */
async function inboxCli(args: string[]): Promise<string> {
  const proc = Bun.spawn([process.execPath, "src/bin/inbox.ts", ...args], {
    cwd: join(import.meta.dir, "..", ".."),
    env: { ...process.env, DATABASE_URL: database.url },
    stdout: "pipe",
    stderr: "pipe",
    timeout: 20_000,
  });
  const [stdout, stderr] = await Promise.all([new Response(proc.stdout).text(), new Response(proc.stderr).text(), proc.exited]);
  expect({ code: proc.exitCode, stderr }).toEqual({ code: 0, stderr: "" });
  return stdout;
}
