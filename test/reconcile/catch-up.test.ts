// The automatic catch-up: at start after downtime, on a schedule, one process at a time.
import { afterAll, beforeEach, expect, setDefaultTimeout, test } from "bun:test";
import type { Db } from "../../src/db/db.ts";
import type { RunningFakeStripe } from "../../src/dev/fake-stripe/serve.ts";
import { runBackfillRequests, runCatchUp, type CatchUpEndpoint } from "../../src/reconcile/catch-up.ts";
import { recordBackfillRequest } from "../../src/handlers/backfill-requests.ts";
import { insertInbox } from "../../src/inbox/inbox.ts";
import { stripeEventLister } from "../../src/reconcile/stripe-events.ts";
import { handlersFor, migratingHandlersFor } from "../../src/receiver/endpoints.ts";
import { catchUpEndpoints, readCatchUpSettings, startCatchUp } from "../../src/runtime/catch-up.ts";
import { freePort } from "../../src/runtime/embedded-postgres.ts";
import { stripeApiClient } from "../../src/stripe-api/client.ts";
import { closeAll, connections, freshDatabase, inboxRowFor } from "../support/helpers.ts";
import { waitUntil } from "../support/wait-until.ts";
import { API_KEY, fakeWith, recentEvents } from "./backfill-support.ts";

setDefaultTimeout(60_000);
const NOW = Math.floor(Date.now() / 1000);
const events = recentEvents(NOW - 3_600);
const fakes: RunningFakeStripe[] = [];
let database: Awaited<ReturnType<typeof freshDatabase>>;
let db: Db;

beforeEach(async () => {
  await database?.drop();
  database = await freshDatabase();
  db = database.db;
});
afterAll(async () => {
  await database?.drop();
  await Promise.all(fakes.map((f) => f.stop()));
});

const endpoint: CatchUpEndpoint = {
  target: { provider: "stripe", endpoint: "billing", handlers: handlersFor("stripe")! },
  mode: "sync",
  backoff: { baseMs: 1_000, capMs: 600_000 },
};

function catchUp(on: Db, fake: RunningFakeStripe, extra: { everyMs?: number; rounds?: number; log?: Record<string, unknown>[] } = {}) {
  const controller = new AbortController();
  let rounds = 0;
  const stripe = stripeApiClient({ apiKey: API_KEY, apiBase: new URL(fake.url) });
  return runCatchUp({
    db: on,
    list: stripeEventLister(stripe, {}, { sleep: async () => {} }),
    endpoints: [endpoint],
    idleAfterMs: 3_600_000,
    everyMs: extra.everyMs,
    signal: controller.signal,
    log: (line) => extra.log?.push(line),
    // Each wait of the schedule is one round; the test decides how many.
    sleep: async () => {
      if (++rounds > (extra.rounds ?? 0)) controller.abort();
    },
  });
}

test("`runCatchUp()` backfills at start an endpoint that received nothing for the threshold", async () => {
  const f = fakeWith(events);
  fakes.push(f);
  const log: Record<string, unknown>[] = [];
  await catchUp(db, f, { log });
  expect((await db`select count(*)::int as n from webhook_inbox where source = 'api'`)[0]!.n).toBe(events.length);
  expect(log[0]).toMatchObject({ catch_up: "done", endpoint: "billing", new: events.length });
});

test("`runCatchUp()` leaves an endpoint alone at start when it received an event within the threshold", async () => {
  const f = fakeWith(events);
  fakes.push(f);
  // A delivery recorded just now (its state row and its payload row, as a real one writes them).
  await insertInbox(db, [inboxRowFor({ provider: "stripe", endpoint: "billing", eventId: "evt_recent" })]);
  await catchUp(db, f);
  expect((await db`select count(*)::int as n from webhook_inbox`)[0]!.n).toBe(1);
});

test("`runCatchUp()` with a schedule picks up events that appear later", async () => {
  const f = fakeWith(events.slice(0, 10));
  fakes.push(f);
  const controller = new AbortController();
  const stripe = stripeApiClient({ apiKey: API_KEY, apiBase: new URL(f.url) });
  let rounds = 0;
  await runCatchUp({
    db,
    list: stripeEventLister(stripe, {}, { sleep: async () => {} }),
    endpoints: [endpoint],
    idleAfterMs: 3_600_000,
    everyMs: 60_000,
    signal: controller.signal,
    log: () => {},
    sleep: async () => {
      rounds++;
      if (rounds === 1) for (const e of events.slice(10)) f.store.putEvent(e, false);
      if (rounds === 2) controller.abort();
    },
  });
  expect((await db`select count(*)::int as n from webhook_inbox`)[0]!.n).toBe(events.length);
});

test("`runCatchUp()` in two processes at once: one backfills, the other finds the lease taken (one connection each)", async () => {
  const f = fakeWith(events);
  fakes.push(f);
  const [a, b] = connections(database.url, 2);
  const logs: Record<string, unknown>[][] = [[], []];
  try {
    await Promise.all([catchUp(a!, f, { log: logs[0] }), catchUp(b!, f, { log: logs[1] })]);
  } finally {
    await closeAll([a!, b!]);
  }
  const statuses = logs.flat().map((l) => l.catch_up);
  // Either one ran and the other was busy, or the second started after the first finished (then not idle).
  expect(statuses.filter((s) => s === "done").length).toBe(1);
  expect((await db`select count(*)::int as n from webhook_inbox`)[0]!.n).toBe(events.length);
  expect((await db`select count(*)::int as n from ledger_entries`)[0]!.n).toBeGreaterThan(0);
});

test("`readCatchUpSettings()` is off by default and requires STRIPE_API_KEY once turned on", () => {
  expect(readCatchUpSettings({})).toEqual({ idleAfterMs: undefined, everyMs: undefined });
  expect(() => readCatchUpSettings({ RECONCILE_EVERY: "15m" })).toThrow(/STRIPE_API_KEY is required/);
  expect(readCatchUpSettings({ RECONCILE_EVERY: "15m", RECONCILE_IDLE_AFTER: "1h", STRIPE_API_KEY: API_KEY })).toEqual({
    idleAfterMs: 3_600_000,
    everyMs: 900_000,
  });
  expect(() => readCatchUpSettings({ RECONCILE_EVERY: "soon" })).toThrow(/RECONCILE_EVERY must be a positive duration/);
});

test("`catchUpEndpoints()` needs no signing secret with DATABASE_URL (the worker, which runs the catch-up too, has none)", () => {
  const endpoints = catchUpEndpoints({
    DATABASE_URL: "postgres://u:p@db.example:5432/inbox",
    STRIPE_ENDPOINTS: "events",
    STRIPE_ENDPOINT_KIND_EVENTS: "thin",
    INBOX_MODE: "async",
  });
  expect(endpoints.map((e) => [e.target.provider, e.target.endpoint, e.mode])).toEqual([
    ["stripe", "billing", "async"],
    ["stripe", "events", "async"],
  ]);
});

test("`startCatchUp()` logs a failure to reach STRIPE_API_BASE naming its host:port, never the key", async () => {
  const port = await freePort(); // free a moment ago: nothing listens there
  const env = { STRIPE_API_KEY: API_KEY, STRIPE_API_BASE: `http://127.0.0.1:${port}`, RECONCILE_IDLE_AFTER: "1h" };
  const log: Record<string, unknown>[] = [];
  // Without RECONCILE_EVERY it runs the start check only (after its 8 tries, with real waits) and returns.
  await startCatchUp(env, readCatchUpSettings(env), db, new AbortController().signal, (line) => log.push(line));
  expect(log).toEqual([
    {
      catch_up: "failed",
      endpoint: "billing",
      error: `Cannot connect to the Stripe API at 127.0.0.1:${port} (STRIPE_API_BASE): connection refused (ECONNREFUSED)`,
    },
  ]);
});

test("`runBackfillRequests()` backfills a health notification's window for its thin endpoint once, as classic events claiming their change, and finishes the request", async () => {
  const f = fakeWith(events);
  fakes.push(f);
  const window = { start: new Date((events[3]!.created as number) * 1000), end: new Date((NOW - 60) * 1000) };
  const id = await db.begin((tx) => recordBackfillRequest(tx, { endpoint: "thin", requestedBy: "evt_health_1", ...window }));
  const stripe = stripeApiClient({ apiKey: API_KEY, apiBase: new URL(f.url) });
  const thin: CatchUpEndpoint = {
    target: { provider: "stripe", endpoint: "thin", handlers: migratingHandlersFor("stripe")! },
    mode: "async",
    backoff: { baseMs: 1_000, capMs: 600_000 },
  };
  const serve = async () => {
    const controller = new AbortController();
    const log: Record<string, unknown>[] = [];
    await runBackfillRequests({
      db,
      list: stripeEventLister(stripe, {}, { sleep: async () => {} }),
      endpoints: new Map([["thin", thin]]),
      signal: controller.signal,
      log: (line) => log.push(line),
      // No request left: the first wait ends the run.
      sleep: async () => controller.abort(),
    });
    return log;
  };
  const log = await serve();
  expect(log).toEqual([expect.objectContaining({ backfill_request: "done", id })]);
  const rows = await db<{ n: number; first: string }[]>`
    select count(*)::int as n, min(event_id) as first from webhook_inbox where provider = 'stripe' and endpoint = 'thin' and source = 'api' and processed_at is null`;
  // Events from the window's start on (the window's first event and all later ones), queued for the worker.
  expect(rows[0]!.n).toBe(events.length - 3);
  const [request] = await db<
    { finished: boolean }[]
  >`select finished_at is not null as finished from event_backfill_requests where id = ${id!}`;
  expect(request!.finished).toBe(true);
  // The checkpoint and lease are untouched (a filtered run), and a second pass finds no request.
  expect((await db`select count(*)::int as n from event_backfill_checkpoints where endpoint = 'thin'`)[0]!.n).toBe(0);
  expect(await serve()).toEqual([]);
});

test("`runBackfillRequests()` stopped while it looks for a request returns at once, not after its 30 s poll", async () => {
  const stop = new AbortController();
  // The stop arrives during the look-up (a worker's SIGTERM right after start): the wait after it must not start.
  const stopping = ((strings: TemplateStringsArray, ...values: unknown[]) => {
    stop.abort();
    return (db as unknown as (s: TemplateStringsArray, ...v: unknown[]) => unknown)(strings, ...values);
  }) as unknown as Db;
  const started = Date.now();
  await runBackfillRequests({
    db: stopping,
    list: async () => ({ data: [], hasMore: false }),
    endpoints: new Map(),
    signal: stop.signal,
    log: () => {},
  });
  expect(Date.now() - started).toBeLessThan(5_000);
});

test("`runBackfillRequests()` polling many times leaves at most one listener on its stop signal (each pause removes its own)", async () => {
  const stop = new AbortController();
  const signal = stop.signal;
  let listeners = 0;
  let pauses = 0;
  const add = signal.addEventListener.bind(signal);
  const remove = signal.removeEventListener.bind(signal);
  signal.addEventListener = ((...args: Parameters<typeof add>) => (pauses++, listeners++, add(...args))) as typeof add;
  signal.removeEventListener = ((...args: Parameters<typeof remove>) => (listeners--, remove(...args))) as typeof remove;
  const run = runBackfillRequests({
    db,
    list: async () => ({ data: [], hasMore: false }),
    endpoints: new Map(),
    signal,
    log: () => {},
    pollMs: 1,
  });
  await waitUntil("50 pauses", async () => pauses >= 50);
  expect(listeners).toBeLessThanOrEqual(1);
  stop.abort();
  await run;
});
