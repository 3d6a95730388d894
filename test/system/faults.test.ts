// Outages and crashes against real PostgreSQL: a stopped and restarted server, backends terminated in
// the middle of the inbox transaction, a saturated pool, and the real `serve` entry file draining on
// SIGTERM. Every server and child this file starts is stopped in `finally` and again in afterAll;
// children are signalled only by their pid, and the receiver child exits by itself after 30 s.
import { spawnBun, waitForLine, type Running } from "../support/bun-child.ts";
import { afterAll, beforeEach, expect, test } from "bun:test";
import { rm } from "node:fs/promises";
import { createConnection } from "node:net";
import { dirname, join } from "node:path";
import type { Subprocess } from "bun";
import { createApp, type App, type Endpoint } from "../../src/receiver/app.ts";
import { connect, type Db } from "../../src/db/db.ts";
import { stripeEndpoints } from "../../src/receiver/endpoints.ts";
import type { Handler, HandlerTable } from "../../src/handlers/handler-table.ts";
import { billingHandlers } from "../../src/handlers/billing.ts";
import { migrate } from "../../src/db/migrate.ts";
import { freePort, startEmbeddedPostgres, temporaryDataDir, type EmbeddedServer } from "../../src/runtime/embedded-postgres.ts";
import { loadMigrations } from "../../src/runtime/migrations-fs.ts";
import { signStripePayload } from "../../src/providers/stripe.ts";
import { closeAll, connections, count, eventBody, freshDatabase, invoice, SECRET, signedRequest } from "../support/helpers.ts";
import { waitUntil } from "../support/wait-until.ts";

const fresh = await freshDatabase();
const db = fresh.db;

const BIN_SERVE = join(import.meta.dir, "children", "bin-serve.ts");
const URL_DEFAULT = "http://receiver.test/webhooks/stripe";
/** application_name of the pools the apps under test use, to find their backends in pg_stat_activity. */
const APP_NAME = "faults-test-app";
const THROWAWAY_FLAGS = ["-c", "fsync=off"];
const quiet = (): void => {};

/** Everything that must not outlive this file: throwaway servers, their directories, pools, children. */
const leftovers = { servers: new Set<EmbeddedServer>(), dirs: new Set<string>(), pools: new Set<Db>(), children: new Set<Subprocess>() };

afterAll(async () => {
  for (const child of leftovers.children) {
    if (child.exitCode === null && child.signalCode === null) process.kill(child.pid, "SIGKILL");
    await child.exited;
  }
  await Promise.all([...leftovers.pools].map((p) => p.end({ timeout: 1 })));
  await Promise.all([...leftovers.servers].map((s) => s.stop()));
  await Promise.all([...leftovers.dirs].map((d) => rm(dirname(d), { recursive: true, force: true })));
  await fresh.drop();
});
beforeEach(async () => {
  await db`truncate webhook_inbox, outbox, ledger_entries, invoices`;
});

interface Reply {
  status: number;
  retryAfter: string | null;
  body: { outcome?: string; event_id?: string; error?: string; message?: string; status?: string };
}

/** A pool for an app under test, ended in afterAll if the test does not end it. */
function pool(url: string, options: Parameters<typeof connect>[1] = {}): Db {
  const p = connect(url, { applicationName: APP_NAME, ...options });
  leftovers.pools.add(p);
  return p;
}

/**
 * Ends a pool of a test. The bound is short because once a backend of a pool with max ≥ 2 was
 * terminated, postgres.js 3.4.9 on Bun waits for the whole timeout in end().
 */
async function endPool(p: Db): Promise<void> {
  leftovers.pools.delete(p);
  await p.end({ timeout: 1 });
}

/** The billing endpoint with `handlers` in place of the billing handler table. */
function billingEndpoint(handlers: HandlerTable): Endpoint {
  const [base] = stripeEndpoints([{ name: "billing", secrets: [SECRET] }]);
  if (!base) throw new Error("stripeEndpoints() returned no endpoint");
  return { ...base, handlers };
}

function billingApp(
  target: Db,
  handlers: HandlerTable = billingHandlers,
  extra: { maxInFlight?: number; queueTimeoutMs?: number } = {},
): App {
  return createApp({ db: target, endpoints: [billingEndpoint(handlers)], log: quiet, ...extra });
}

function paidHandler(): Handler {
  const handler = billingHandlers["invoice.paid"];
  if (!handler) throw new Error("billing has no invoice.paid handler");
  return handler;
}

function paidEvent(eventId: string, invoiceId: string): string {
  return eventBody(eventId, "invoice.paid", invoice({ id: invoiceId, amount_paid: 2000, status: "paid" }));
}

async function toReply(response: Response): Promise<Reply> {
  return { status: response.status, retryAfter: response.headers.get("retry-after"), body: (await response.json()) as Reply["body"] };
}

/** Signs `body` now and delivers it to `app`. */
async function deliver(app: App, body: string): Promise<Reply> {
  return toReply(await app.fetch(await signedRequest(URL_DEFAULT, body)));
}

/** `promise`, or a failure naming `what` if it has not settled after `ms` (a bound, not a latency assertion). */
async function within<T>(ms: number, what: string, promise: Promise<T>): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what}: no answer within ${ms} ms`)), ms);
  });
  return Promise.race([promise, late]).finally(() => clearTimeout(timer));
}

async function tableCounts(target: Db = db) {
  return {
    inbox: await count(target, "webhook_inbox"),
    invoices: await count(target, "invoices"),
    ledger: await count(target, "ledger_entries"),
    outbox: await count(target, "outbox"),
  };
}

/** A promise and the function that settles it: a gate a test opens when it is ready. */
function gate(): { opened: Promise<void>; open: () => void } {
  let open!: () => void;
  const opened = new Promise<void>((resolve) => (open = resolve));
  return { opened, open };
}

/** Holds `select … for update` on the invoice row in a transaction of `locker` until `release` opens. */
async function lockInvoice(locker: Db, invoiceId: string, release: Promise<void>): Promise<{ done: Promise<unknown> }> {
  const locked = gate();
  const done = locker.begin(async (tx) => {
    const rows = await tx`select id from invoices where id = ${invoiceId} for update`;
    if (rows.length !== 1) throw new Error(`Cannot lock invoice ${invoiceId}: no such row`);
    locked.open();
    await release;
  });
  await Promise.race([locked.opened, done]);
  return { done };
}

/** Backends in this database that wait on a lock (of `applicationName` only, when given). */
async function lockWaiters(applicationName?: string): Promise<number[]> {
  const rows = await db<{ pid: number }[]>`
    select pid
      from pg_stat_activity
     where datname = current_database()
       and wait_event_type = 'Lock'
       and (${applicationName ?? null}::text is null or application_name = ${applicationName ?? null}::text)
  `;
  return rows.map((r) => r.pid);
}

test("`createApp()` answers 503 database_unavailable while PostgreSQL is down, keeps /healthz at 200, and recovers by itself when it is back", async () => {
  const dir = await temporaryDataDir();
  leftovers.dirs.add(dir);
  let server = await startEmbeddedPostgres({ dir, port: 0, flags: THROWAWAY_FLAGS });
  leftovers.servers.add(server);
  const setup = connect(server.url, { max: 1 });
  await migrate(setup, loadMigrations());
  await setup.end({ timeout: 5 });
  const target = pool(server.url, { connectTimeoutSec: 2, max: 4 });
  const app = billingApp(target);
  const probe = (path: string) => within(10_000, `GET ${path}`, app.fetch(new Request(`http://receiver.test${path}`)));

  try {
    const created = eventBody("evt_outage_created_1", "invoice.created", invoice({ id: "in_outage_1" }));
    const paid = paidEvent("evt_outage_paid_1", "in_outage_1");
    const other = eventBody("evt_outage_created_2", "invoice.created", invoice({ id: "in_outage_2" }));
    expect(await deliver(app, created)).toMatchObject({ status: 200, body: { outcome: "processed" } });

    await server.stop();
    leftovers.servers.delete(server);
    const during: Reply[] = [];
    for (const body of [paid, other, paid, other])
      during.push(await within(10_000, "a delivery while PostgreSQL is down", deliver(app, body)));
    for (const reply of during) {
      expect(reply.status).toBe(503);
      expect(reply.body.error).toBe("database_unavailable");
      expect(Number(reply.retryAfter)).toBeGreaterThan(0);
    }
    const ready = await probe("/readyz");
    expect(ready.status).toBe(503);
    expect(Number(ready.headers.get("retry-after"))).toBeGreaterThan(0);
    expect((await probe("/healthz")).status).toBe(200);

    // The same directory and port, as after a database restart: the app is not told, it must notice.
    server = await startEmbeddedPostgres({ dir, port: server.port, flags: THROWAWAY_FLAGS });
    leftovers.servers.add(server);
    await waitUntil("/readyz answering 200 after the restart", async () => (await probe("/readyz")).status === 200, {
      timeoutMs: 30_000,
      intervalMs: 100,
    });
    // Nothing of the 503 attempts was kept: only the event acknowledged before the outage.
    expect(await tableCounts(target)).toEqual({ inbox: 1, invoices: 1, ledger: 0, outbox: 0 });

    for (const body of [paid, other]) expect(await deliver(app, body)).toMatchObject({ status: 200, body: { outcome: "processed" } });
    for (const body of [paid, other]) expect(await deliver(app, body)).toMatchObject({ status: 200, body: { outcome: "duplicate" } });
    expect(await tableCounts(target)).toEqual({ inbox: 3, invoices: 2, ledger: 1, outbox: 1 });
    const invoices = await target`select id, status from invoices order by id`;
    expect([...invoices]).toEqual([
      { id: "in_outage_1", status: "paid" },
      { id: "in_outage_2", status: "draft" },
    ]);
  } finally {
    await endPool(target);
    await server.stop();
    leftovers.servers.delete(server);
    await rm(dirname(dir), { recursive: true, force: true });
    leftovers.dirs.delete(dir);
  }
}, 90_000);

test("`createApp()` answers 5xx when the handler's own backend is terminated inside the inbox transaction, keeps nothing, and the same pool processes the redelivery, 3 times over", async () => {
  const target = pool(fresh.url, { max: 2 });
  const paid = paidHandler();
  let handlerRuns = 0;
  const killing = billingApp(target, {
    ...billingHandlers,
    "invoice.paid": async (tx, object, context) => {
      await paid(tx, object, context);
      handlerRuns++;
      await tx`select pg_terminate_backend(pg_backend_pid())`;
    },
  });
  const normal = billingApp(target);
  try {
    for (let round = 1; round <= 3; round++) {
      const body = paidEvent(`evt_self_killed_${round}`, `in_self_killed_${round}`);
      const res = await within(10_000, "a delivery whose backend is terminated", deliver(killing, body));
      expect(handlerRuns).toBe(round);
      expect(res.status).toBeGreaterThanOrEqual(500);
      expect(res.status).toBeLessThan(600);
      expect(["database_unavailable", "processing_failed"]).toContain(res.body.error ?? "");
      // The real work ran before the kill; none of it survived the rollback.
      const before = round - 1;
      expect(await tableCounts()).toEqual({ inbox: before, invoices: before, ledger: before, outbox: before });

      expect(await deliver(normal, body)).toMatchObject({
        status: 200,
        body: { outcome: "processed", event_id: `evt_self_killed_${round}` },
      });
      expect(await tableCounts()).toEqual({ inbox: round, invoices: round, ledger: round, outbox: round });
      expect(await count(db, "ledger_entries", `invoice_id = 'in_self_killed_${round}'`)).toBe(1);
    }
  } finally {
    await endPool(target);
  }
}, 30_000);

test("`createApp()` answers 5xx when another connection terminates its backend while the handler waits on a row lock, keeps nothing, and processes the redelivery, 3 times over", async () => {
  const target = pool(fresh.url, { max: 2 });
  const app = billingApp(target);
  const [locker] = connections(fresh.url, 1);
  if (!locker) throw new Error("connections() returned no pool");
  const release = gate();
  try {
    for (let round = 1; round <= 3; round++) {
      const invoiceId = `in_lock_killed_${round}`;
      const eventId = `evt_lock_killed_${round}`;
      const body = paidEvent(eventId, invoiceId);
      await db`insert into invoices (id, customer_id, status, currency, amount_due) values (${invoiceId}, 'cus_test_1', 'open', 'usd', 2000)`;
      const roundGate = gate();
      const lock = await lockInvoice(locker, invoiceId, Promise.race([roundGate.opened, release.opened]));

      const pending = deliver(app, body);
      await waitUntil("the delivery waiting on the invoice row lock", async () => (await lockWaiters(APP_NAME)).length === 1);
      const [pid] = await lockWaiters(APP_NAME);
      const [terminated] = await db<{ ok: boolean }[]>`select pg_terminate_backend(${pid ?? 0}::int) as ok`;
      expect(terminated?.ok).toBe(true);
      const res = await within(10_000, "a delivery whose backend was terminated", pending);
      expect(res.status).toBeGreaterThanOrEqual(500);
      expect(res.status).toBeLessThan(600);
      expect(["database_unavailable", "processing_failed"]).toContain(res.body.error ?? "");
      roundGate.open();
      await lock.done;

      expect(await count(db, "webhook_inbox", `event_id = '${eventId}'`)).toBe(0);
      expect(await count(db, "ledger_entries", `invoice_id = '${invoiceId}'`)).toBe(0);
      expect(await count(db, "outbox", `aggregate_id = '${invoiceId}'`)).toBe(0);
      const [before] = await db`select status from invoices where id = ${invoiceId}`;
      expect(before?.status).toBe("open");

      expect(await deliver(app, body)).toMatchObject({ status: 200, body: { outcome: "processed", event_id: eventId } });
      expect(await count(db, "ledger_entries", `invoice_id = '${invoiceId}'`)).toBe(1);
      expect(await tableCounts()).toEqual({ inbox: round, invoices: round, ledger: round, outbox: round });
      const [after] = await db`select status from invoices where id = ${invoiceId}`;
      expect(after?.status).toBe("paid");
    }
  } finally {
    release.open();
    await closeAll([locker]);
    await endPool(target);
  }
}, 30_000);

test("`createApp()` with maxInFlight 2 answers 200 processed or 503 overloaded to 8 concurrent deliveries, keeps nothing of a 503, and processes the redeliveries", async () => {
  const target = pool(fresh.url, { max: 3 });
  const paid = paidHandler();
  // Each delivery holds its transaction (and its slot) for 1 s after the real work.
  const app = billingApp(
    target,
    {
      ...billingHandlers,
      "invoice.paid": async (tx, object, context) => {
        await paid(tx, object, context);
        await tx`select pg_sleep(1)`;
      },
    },
    { maxInFlight: 2, queueTimeoutMs: 200 },
  );
  const events = Array.from({ length: 8 }, (_, i) => ({ eventId: `evt_saturated_${i}`, invoiceId: `in_saturated_${i}` }));
  try {
    const requests = await Promise.all(events.map((e) => signedRequest(URL_DEFAULT, paidEvent(e.eventId, e.invoiceId))));
    const replies = await within(20_000, "8 concurrent deliveries", Promise.all(requests.map(async (r) => toReply(await app.fetch(r)))));

    const rejected: typeof events = [];
    for (const [i, reply] of replies.entries()) {
      const e = events[i];
      if (!e) throw new Error(`no event ${i}`);
      if (reply.status === 200) {
        expect(reply.body).toEqual({ outcome: "processed", event_id: e.eventId });
        expect(await count(db, "webhook_inbox", `event_id = '${e.eventId}' and outcome = 'processed'`)).toBe(1);
        expect(await count(db, "invoices", `id = '${e.invoiceId}' and status = 'paid' and amount_paid = 2000`)).toBe(1);
        expect(await count(db, "ledger_entries", `invoice_id = '${e.invoiceId}' and amount = 2000 and event_id = '${e.eventId}'`)).toBe(1);
        expect(await count(db, "outbox", `aggregate_id = '${e.invoiceId}'`)).toBe(1);
      } else {
        expect(reply.status).toBe(503);
        expect(reply.body.error).toBe("overloaded");
        expect(Number(reply.retryAfter)).toBeGreaterThan(0);
        expect(await count(db, "webhook_inbox", `event_id = '${e.eventId}'`)).toBe(0);
        expect(await count(db, "invoices", `id = '${e.invoiceId}'`)).toBe(0);
        rejected.push(e);
      }
    }
    expect(rejected.length).toBeGreaterThan(0);
    expect(rejected.length).toBeLessThan(8);
    const accepted = 8 - rejected.length;
    expect(await tableCounts()).toEqual({ inbox: accepted, invoices: accepted, ledger: accepted, outbox: accepted });

    for (const e of rejected) {
      expect(await deliver(app, paidEvent(e.eventId, e.invoiceId))).toMatchObject({
        status: 200,
        body: { outcome: "processed", event_id: e.eventId },
      });
    }
    expect(await tableCounts()).toEqual({ inbox: 8, invoices: 8, ledger: 8, outbox: 8 });
  } finally {
    await endPool(target);
  }
}, 40_000);

function spawnServe(env: Record<string, string>): Running {
  return spawnBun([BIN_SERVE], { ...process.env, ...env }, leftovers.children);
}

/**
 * Opens a NEW TCP connection to 127.0.0.1:`port` and sends `request` (raw HTTP/1.1 with
 * `Connection: close`): "refused" when the connection is refused, else the response's status code.
 */
function newConnectionAttempt(port: number, request: string): Promise<"refused" | number> {
  return new Promise((resolve, reject) => {
    const socket = createConnection({ host: "127.0.0.1", port });
    let received = "";
    socket.setTimeout(5_000, () => {
      socket.destroy();
      reject(new Error(`A new connection to port ${port} got no answer within 5 s`));
    });
    socket.on("connect", () => socket.write(request));
    socket.on("data", (chunk: Buffer) => {
      received += chunk.toString("latin1");
      const status = /^HTTP\/1\.[01] (\d{3})/.exec(received)?.[1];
      if (status !== undefined) {
        socket.destroy();
        resolve(Number(status));
      }
    });
    socket.on("error", (err: NodeJS.ErrnoException) => (err.code === "ECONNREFUSED" ? resolve("refused") : reject(err)));
    socket.on("close", () =>
      reject(new Error(`A new connection to port ${port} closed without a status line: ${JSON.stringify(received.slice(0, 200))}`)),
    );
  });
}

test("`serve` on SIGTERM stops taking connections, finishes the in-flight delivery with 200 processed, and exits 0", async () => {
  const port = await freePort();
  const invoiceId = "in_sigterm_1";
  const eventId = "evt_sigterm_paid_1";
  await db`insert into invoices (id, customer_id, status, currency, amount_due) values (${invoiceId}, 'cus_test_1', 'open', 'usd', 2000)`;
  const [locker] = connections(fresh.url, 1);
  if (!locker) throw new Error("connections() returned no pool");
  const release = gate();
  const serve = spawnServe({
    DATABASE_URL: fresh.url,
    STRIPE_WEBHOOK_SECRET: SECRET,
    PORT: String(port),
    HOST: "127.0.0.1",
    INBOX_MODE: "sync",
  });
  try {
    await waitForLine(serve, "webhook-inbox listening on");
    const lock = await lockInvoice(locker, invoiceId, release.opened);

    const body = paidEvent(eventId, invoiceId);
    const signature = await signStripePayload(body, SECRET, Math.floor(Date.now() / 1000));
    const inFlight = fetch(`http://127.0.0.1:${port}/webhooks/stripe`, {
      method: "POST",
      headers: { "content-type": "application/json", "stripe-signature": signature },
      body,
    }).then(toReply);
    await waitUntil("the delivery waiting on the invoice row lock", async () => (await lockWaiters()).length === 1);

    process.kill(serve.child.pid, "SIGTERM");
    await waitForLine(serve, "SIGTERM: no longer accepting");
    // A new delivery on a new connection is refused (or turned away with 503): it must not be taken on.
    const lateBody = paidEvent("evt_sigterm_late_1", "in_sigterm_late_1");
    const lateSignature = await signStripePayload(lateBody, SECRET, Math.floor(Date.now() / 1000));
    const raw =
      `POST /webhooks/stripe HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\nConnection: close\r\nContent-Type: application/json\r\n` +
      `Stripe-Signature: ${lateSignature}\r\nContent-Length: ${Buffer.byteLength(lateBody)}\r\n\r\n${lateBody}`;
    let late: "refused" | number = 0;
    await waitUntil(
      "a new connection being refused or answered 503",
      async () => {
        late = await newConnectionAttempt(port, raw);
        return late === "refused" || late === 503;
      },
      { timeoutMs: 5_000, intervalMs: 50 },
    );
    expect(["refused", 503]).toContain(late);
    // Still in flight: the drain waits for it.
    expect(serve.child.exitCode).toBeNull();

    release.open();
    await lock.done;
    expect(await within(10_000, "the in-flight delivery", inFlight)).toMatchObject({
      status: 200,
      body: { outcome: "processed", event_id: eventId },
    });
    expect(await within(15_000, "the receiver's exit", serve.child.exited)).toBe(0);
    await serve.stdoutDone;
    expect(await serve.stderr).toBe("");

    expect(await count(db, "webhook_inbox", `event_id = '${eventId}' and outcome = 'processed'`)).toBe(1);
    expect(await count(db, "webhook_inbox", "event_id = 'evt_sigterm_late_1'")).toBe(0);
    expect(await count(db, "ledger_entries", `invoice_id = '${invoiceId}' and event_id = '${eventId}'`)).toBe(1);
    const [inv] = await db`select status from invoices where id = ${invoiceId}`;
    expect(inv?.status).toBe("paid");
  } finally {
    release.open();
    if (serve.child.exitCode === null && serve.child.signalCode === null) process.kill(serve.child.pid, "SIGKILL");
    await serve.child.exited;
    await closeAll([locker]);
  }
}, 60_000);
