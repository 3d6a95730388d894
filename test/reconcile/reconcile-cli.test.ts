// `bun run reconcile events` as a real process: output, exit codes, and a SIGKILL in the middle of a page.
import { afterAll, beforeAll, expect, test } from "bun:test";
import type { Subprocess } from "bun";
import type { Db } from "../../src/db/db.ts";
import type { RunningFakeStripe } from "../../src/dev/fake-stripe/serve.ts";
import { insertInbox } from "../../src/inbox/inbox.ts";
import { stripeApiEvent } from "../../src/providers/stripe.ts";
import { handlersFor } from "../../src/receiver/endpoints.ts";
import { receiveSync } from "../../src/receiver/receive.ts";
import { reconcileEventsCommand } from "../../src/reconcile/events-command.ts";
import { reconcileInvoicesCommand } from "../../src/reconcile/invoices-command.ts";
import { reconcileDisputesCommand } from "../../src/reconcile/money-commands.ts";
import { freePort } from "../../src/runtime/embedded-postgres.ts";
import { spawnBun } from "../support/bun-child.ts";
import { connections, freshDatabase, SECRET } from "../support/helpers.ts";
import { waitUntil } from "../support/wait-until.ts";
import { API_KEY, endState, fakeWith, recentEvents } from "./backfill-support.ts";

const NOW = Math.floor(Date.now() / 1000);
const events = recentEvents(NOW - 3_600);
const tracked = new Set<Subprocess>();
let database: Awaited<ReturnType<typeof freshDatabase>>;
let db: Db;
let fake: RunningFakeStripe;

beforeAll(async () => {
  database = await freshDatabase();
  db = database.db;
  fake = fakeWith(events);
});
afterAll(async () => {
  for (const child of tracked) child.kill("SIGKILL");
  await fake.stop();
  await database.drop();
});

function env(extra: Record<string, string> = {}) {
  return {
    PATH: process.env.PATH,
    DATABASE_URL: database.url,
    STRIPE_WEBHOOK_SECRET: SECRET,
    STRIPE_API_KEY: API_KEY,
    STRIPE_API_BASE: fake.url,
    ...extra,
  };
}

async function reconcile(args: string[], extra: Record<string, string> = {}) {
  const run = spawnBun(["src/bin/reconcile.ts", ...args], env(extra), tracked);
  const code = await run.child.exited;
  await run.stdoutDone;
  return { code, stdout: run.lines.join("\n"), stderr: await run.stderr, run };
}

test("`reconcile` answers usage errors with exit 2: a page size over 100, an unknown flag, no API key for events or invoices (never echoed)", async () => {
  expect((await reconcile(["events", "--page-size", "101"])).code).toBe(2);
  expect((await reconcile(["events", "--bogus"])).code).toBe(2);
  const invoices = await reconcile(["invoices"], { STRIPE_API_KEY: "" });
  expect(invoices.code).toBe(2);
  expect(invoices.stderr).toContain("STRIPE_API_KEY is required");
  const noKey = await reconcile(["events"], { STRIPE_API_KEY: "" });
  expect(noKey.code).toBe(2);
  expect(noKey.stderr).toContain("STRIPE_API_KEY is required");
  const badKey = await reconcile(["events"], { STRIPE_API_KEY: "whsec_notakeynotakey" });
  expect(badKey.stderr).not.toContain("notakeynotakey");
}, 60_000);

test("`reconcile events --dry-run --json` prints a machine summary and writes nothing", async () => {
  const { code, stdout } = await reconcile(["events", "--dry-run", "--json"]);
  expect(code).toBe(0);
  const summary = JSON.parse(stdout) as { exitCode: number; endpoints: { endpoint: string; fresh: number; dryRun: boolean }[] };
  expect(summary.endpoints[0]).toMatchObject({ endpoint: "billing", fresh: events.length, dryRun: true });
  expect((await db`select count(*)::int as n from webhook_inbox`)[0]!.n).toBe(0);
}, 30_000);

test("`reconcile events` and `reconcile invoices|refunds|disputes` run with DATABASE_URL and no STRIPE_WEBHOOK_SECRET (they verify no signature)", async () => {
  const other = await freshDatabase();
  try {
    // Only what reading the Stripe API and the database needs; a second endpoint without its secret too.
    const noSecrets = { STRIPE_WEBHOOK_SECRET: "", DATABASE_URL: other.url, STRIPE_ENDPOINTS: "connect", INBOX_MODE_CONNECT: "async" };
    const backfill = await reconcile(["events", "--dry-run", "--json"], noSecrets);
    expect(backfill.stderr).not.toContain("STRIPE_WEBHOOK_SECRET");
    expect(backfill.code).toBe(0);
    const summary = JSON.parse(backfill.stdout) as { exitCode: number; endpoints: { endpoint: string; events: number }[] };
    expect(summary.endpoints.map((e) => [e.endpoint, e.events])).toEqual([
      ["billing", events.length],
      ["connect", events.length],
    ]);
    for (const kind of ["invoices", "refunds", "disputes"]) {
      const run = await reconcile([kind], noSecrets);
      expect(run.stderr).not.toContain("STRIPE_WEBHOOK_SECRET");
      // The fake holds events only: no object of the kind, so nothing drifted.
      expect({ kind, code: run.code, first: run.stdout.split("\n")[0] }).toEqual({
        kind,
        code: 0,
        first: expect.stringMatching(new RegExp(`^Checked 0 Stripe ${kind} created since .*: no drift$`)),
      });
    }
  } finally {
    await other.drop();
  }
}, 60_000);

test("`reconcile events` on a thin endpoint records the classic events for the worker under that endpoint (as the catch-up does), not as thin rows all \`ignored\`", async () => {
  const other = await freshDatabase();
  try {
    const thin = { DATABASE_URL: other.url, STRIPE_ENDPOINTS: "events", STRIPE_ENDPOINT_KIND_EVENTS: "thin" };
    const run = await reconcile(["events", "--endpoint", "events"], thin);
    expect({ code: run.code, stderr: run.stderr }).toEqual({ code: 0, stderr: "" });
    const rows = await other.db<{ provider: string; state: string; n: number }[]>`
      select provider, case when processed_at is null then 'queued' else outcome end as state, count(*)::int as n
        from webhook_inbox where endpoint = 'events' group by 1, 2 order by 1, 2`;
    // Types with no Stripe handler (plan.created) are settled as ignored; every other event waits for the worker.
    const unhandled = events.filter((e) => !Object.hasOwn(handlersFor("stripe")!, String(e.type))).length;
    expect(unhandled).toBe(1);
    expect([...rows]).toEqual([
      { provider: "stripe", state: "ignored", n: unhandled },
      { provider: "stripe", state: "queued", n: events.length - unhandled },
    ]);
  } finally {
    await other.drop();
  }
}, 60_000);

test("`reconcile events|invoices|disputes` with nothing listening at STRIPE_API_BASE say they cannot connect to its host:port (never that Stripe answered, never the key) and exit 1", async () => {
  const port = await freePort(); // free a moment ago: nothing listens there
  const unreachable = env({ STRIPE_API_BASE: `http://127.0.0.1:${port}` });
  const cannotConnect = `Cannot connect to the Stripe API at 127.0.0.1:${port} (STRIPE_API_BASE): connection refused (ECONNREFUSED)`;
  const openDb = async () => ({ db, close: async () => {} });
  const noWaits = { sleep: async () => {} };
  const check = (code: number, err: string[]) => {
    expect(code).toBe(1);
    // Every try but the last is retried with a line, then one line says why the command gave up.
    expect(err.filter((l) => l.startsWith(`${cannotConnect}`)).length).toBe(7);
    expect(err.join("\n")).not.toMatch(/answered|StripeConnectionError/);
    expect(err.join("\n")).not.toContain(API_KEY);
  };

  const eventsErr: string[] = [];
  const events = await reconcileEventsCommand([], unreachable, { openDb, out: () => {}, err: (l) => eventsErr.push(l), retry: noWaits });
  check(events, eventsErr);
  expect(eventsErr.at(-1)).toBe(`billing: backfill failed: ${cannotConnect} (the checkpoint is after the last page recorded; run again)`);

  for (const [name, command] of [
    ["invoices", reconcileInvoicesCommand],
    ["disputes", reconcileDisputesCommand],
  ] as const) {
    const err: string[] = [];
    const code = await command([], unreachable, { openDatabase: openDb, out: () => {}, err: (l) => err.push(l), retry: noWaits });
    check(code, err);
    expect(err.at(-1)).toBe(`Cannot reconcile ${name}: ${cannotConnect}`);
  }
}, 60_000);

test("`reconcile events` killed (SIGKILL) in the middle of a page and run again leaves no gap and applies nothing twice", async () => {
  // Another transaction holds the key of events[10] (page [10..13] with pages of 4 after the first
  // second [0, 1]), so the run's page transaction waits there with part of the page written.
  const [blocker] = connections(database.url, 1);
  const holding = Promise.withResolvers<void>();
  const release = Promise.withResolvers<void>();
  const held = blocker!.begin(async (tx) => {
    // The same key as the backfill's row, (provider, endpoint, event_id) (sql/0027), so that insert waits on it.
    await insertInbox(tx, [
      {
        key: { provider: "stripe", endpoint: "billing", eventId: events[10]!.id },
        type: "blocker",
        payload: "{}",
        rawBody: null,
        replaced: null,
        source: "webhook",
        createdAtSec: events[10]!.created,
        account: "",
        livemode: false,
        settled: null,
        traceparent: null,
      },
    ]);
    holding.resolve();
    await release.promise;
    throw new Error("roll back the blocker");
  });
  held.catch(() => {});
  await holding.promise;
  const run = spawnBun(["src/bin/reconcile.ts", "events", "--page-size", "4"], env(), tracked);
  await waitUntil(
    "the backfill waiting on the held key",
    async () =>
      (
        await db`select 1 from pg_stat_activity where datname = current_database() and application_name = 'webhook-inbox reconcile' and wait_event_type = 'Lock'`
      ).length === 1,
    { timeoutMs: 30_000 },
  );
  const [cp] = await db`select cursor_event_id from event_backfill_checkpoints`;
  expect(cp!.cursor_event_id).toBe(events[9]!.id);
  run.child.kill("SIGKILL");
  expect(await run.child.exited).not.toBe(0);
  release.resolve();
  await held.catch(() => {});
  await blocker!.end();
  await waitUntil(
    "the killed run's backend to end",
    async () =>
      (await db`select 1 from pg_stat_activity where datname = current_database() and application_name = 'webhook-inbox reconcile'`)
        .length === 0,
    { timeoutMs: 30_000 },
  );
  // The killed page left nothing; the pages before it are recorded.
  expect((await db`select count(*)::int as n from webhook_inbox`)[0]!.n).toBe(10);
  // The killed run still holds the endpoint's lease until it runs out: a rerun meanwhile does nothing.
  const busy = await reconcile(["events", "--page-size", "4"]);
  expect(busy.code).toBe(1);
  expect(busy.stdout).toContain("another process is backfilling this endpoint");
  await db`update event_backfill_checkpoints set lease_until = now() - interval '1 second'`;
  const again = await reconcile(["events", "--page-size", "4", "--json"]);
  expect(again.code).toBe(0);
  const summary = JSON.parse(again.stdout) as { endpoints: { fresh: number; alreadyRecorded: number }[] };
  expect(summary.endpoints[0]!.fresh).toBe(events.length - 10);
  expect((await db`select count(*)::int as n from webhook_inbox where source = 'api'`)[0]!.n).toBe(events.length);
  // Same end state as every event delivered once by webhook.
  const other = await freshDatabase();
  const target = { provider: "stripe", endpoint: "billing", handlers: handlersFor("stripe")! };
  for (const e of events) await receiveSync(other.db, target, stripeApiEvent(e));
  expect(await endState(db)).toEqual(await endState(other.db));
  await other.drop();
}, 120_000);

test("`reconcileEventsCommand()` with --every runs again after each wait until stopped, printing progress per page and a summary per run", async () => {
  const other = await freshDatabase();
  const out: string[] = [];
  const progress: string[] = [];
  const stop = new AbortController();
  let waits = 0;
  try {
    const code = await reconcileEventsCommand(
      ["--every", "1m", "--page-size", "10", "--types", "invoice.paid,invoice.voided"],
      env({ DATABASE_URL: other.url }),
      {
        openDb: async () => ({ db: other.db, close: async () => {} }),
        out: (line) => out.push(line),
        err: () => {},
        progress: (line) => progress.push(line),
        signal: stop.signal,
        sleep: async () => {
          if (++waits === 2) stop.abort();
        },
      },
    );
    expect(code).toBe(0);
    expect(waits).toBe(2);
    const paid = events.filter((e) => e.type === "invoice.paid" || e.type === "invoice.voided").length;
    // Two runs (the stop came during the second wait): the first records them, the second finds them recorded.
    expect(out.filter((l) => l.startsWith("billing:")).length).toBe(2);
    expect(out[0]).toContain(`recorded ${paid} new, 0 already recorded`);
    expect(out.at(-2)).toContain(`recorded 0 new, ${paid} already recorded`);
    expect(progress[0]).toMatch(/^billing: page 1: \d+ event\(s\), \d+ new, \d+ already recorded/);
  } finally {
    await other.drop();
  }
}, 60_000);

test("`serve` with RECONCILE_IDLE_AFTER backfills at start what it never received, and stops cleanly on SIGTERM", async () => {
  const other = await freshDatabase();
  try {
    const serve = spawnBun(["src/bin/serve.ts"], env({ DATABASE_URL: other.url, PORT: "0", RECONCILE_IDLE_AFTER: "1h" }), tracked);
    await waitUntil(
      "the catch-up to record every event",
      async () => (await other.db`select count(*)::int as n from webhook_inbox where source = 'api'`)[0]!.n === events.length,
      { timeoutMs: 60_000 },
    );
    serve.child.kill("SIGTERM");
    expect(await serve.child.exited).toBe(0);
    await serve.stdoutDone;
    expect(serve.lines.some((l) => l.includes('"catch_up":"done"') && l.includes(`"new":${events.length}`))).toBe(true);
  } finally {
    await other.drop();
  }
}, 90_000);
