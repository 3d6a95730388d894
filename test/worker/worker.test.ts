// The async worker against real PostgreSQL (seed §6 and the async rows of the §10 test table):
// claimBatch, processClaim, recordFailures, runWorker, receiveAsync/receiveHybrid and the HTTP modes.
// One connection (or one pool) per concurrent actor.
import { afterAll, beforeEach, describe, expect, test } from "bun:test";
import { createApp, type Endpoint } from "../../src/receiver/app.ts";
import { claimBatch, type Claim, type ClaimOptions } from "../../src/worker/claim.ts";
import { connect, type Db } from "../../src/db/db.ts";
import { stripeEndpoints } from "../../src/receiver/endpoints.ts";
import type { Handler, HandlerTable } from "../../src/handlers/handler-table.ts";
import { billingHandlers } from "../../src/handlers/billing.ts";
import { processClaim, recordFailures, type ProcessOptions } from "../../src/worker/process-claim.ts";
import { receiveAsync, receiveHybrid, type ReceiveTarget } from "../../src/receiver/receive.ts";
import { runWorker, type WorkerOptions } from "../../src/worker/worker.ts";
import { closeAll, connections, count, eventBody, freshDatabase, invoice, SECRET, signedRequest, verified } from "../support/helpers.ts";

const fresh = await freshDatabase();
const db = fresh.db;
afterAll(() => fresh.drop());
beforeEach(async () => {
  await db`truncate webhook_inbox, outbox, ledger_entries, invoices`;
});

const TARGET: ReceiveTarget = { provider: "stripe", endpoint: "billing", handlers: billingHandlers };
/** A long backoff, so a failed row is surely not due again until a test makes it due. */
const BACKOFF = { baseMs: 60_000, capMs: 600_000 };
const CLAIM: ClaimOptions = { limit: 1, leaseMs: 60_000, maxAttempts: 10 };
const bookPayment = requireHandler(billingHandlers, "invoice.paid");
/** Per-test limit for tests that wait on other actors (bun's default is 5 s; the waits below are bounded at 10–20 s). */
const WAITS = 30_000;

class LedgerLockedError extends Error {
  constructor() {
    super("Ledger is locked for the month-end close");
    this.name = "LedgerLockedError";
  }
}
const failingHandlers: HandlerTable = {
  "invoice.paid": async () => {
    throw new LedgerLockedError();
  },
};

function requireHandler(table: HandlerTable, type: string): Handler {
  const handler = table[type];
  if (!handler) throw new Error(`No handler for ${type}`);
  return handler;
}

function processOptions(handlers: HandlerTable, overrides: Partial<ProcessOptions> = {}): ProcessOptions {
  return { tables: { stripe: handlers }, timeoutMs: 5_000, maxAttempts: 10, backoff: BACKOFF, ...overrides };
}

function workerOptions(workerDb: Db, signal: AbortSignal, overrides: Partial<WorkerOptions> = {}): WorkerOptions {
  return { db: workerDb, tables: { stripe: billingHandlers }, signal, pollMs: 50, backoff: BACKOFF, log: () => {}, ...overrides };
}

let seq = 0;
/** A fresh invoice.paid event body for its own invoice (2000 usd paid). */
function paidEvent(overrides: Record<string, unknown> = {}): { eventId: string; body: string } {
  const n = ++seq;
  const eventId = `evt_worker_${n}`;
  return {
    eventId,
    body: eventBody(eventId, "invoice.paid", invoice({ id: `in_worker_${n}`, amount_paid: 2000, status: "paid", ...overrides })),
  };
}

/** Queues a fresh invoice.paid event in async mode; returns its event id. */
async function queuePaid(overrides: Record<string, unknown> = {}): Promise<string> {
  const { eventId, body } = paidEvent(overrides);
  expect(await receiveAsync(db, TARGET, verified(body))).toBe("queued");
  return eventId;
}

async function claimOne(claimDb: Db = db, options: Partial<ClaimOptions> = {}): Promise<Claim> {
  const [claim, ...rest] = await claimBatch(claimDb, { ...CLAIM, ...options });
  expect(rest).toEqual([]);
  if (!claim) throw new Error("Cannot claim: no due row");
  return claim;
}

async function makeDue(eventId: string): Promise<void> {
  await db`update webhook_inbox set available_at = now() where event_id = ${eventId}`;
}

interface InboxRow {
  attempts: number;
  last_error: string | null;
  processed: boolean;
  outcome: string | null;
  needs_review: boolean;
  /** available_at > now(): not due yet. */
  later: boolean;
  available_at: string;
}

async function inboxRow(eventId: string): Promise<InboxRow> {
  const [row] = await db<InboxRow[]>`
    select attempts, last_error, processed_at is not null as processed, outcome,
           needs_review_at is not null as needs_review, available_at > now() as later,
           available_at::text as available_at
      from webhook_inbox
     where (provider, endpoint, event_id) = ('stripe', 'billing', ${eventId})
  `;
  if (!row) throw new Error(`No inbox row for ${eventId}`);
  return row;
}

/** Polls `check` until true; throws naming `what` after `timeoutMs`. A bound, not a speed assertion. */
async function waitFor(what: string, check: () => Promise<boolean> | boolean, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`Cannot observe ${what} within ${timeoutMs} ms`);
    await Bun.sleep(10);
  }
}

const unprocessed = () => count(db, "webhook_inbox", "processed_at is null");

describe("processClaim() and recordFailures()", () => {
  test("`processClaim()` records a handler failure (attempts 1, class and message, backoff) and a later retry processes it", async () => {
    const eventId = await queuePaid({ customer: "cus_secret_marker" });
    const first = await claimOne();
    expect(first).toMatchObject({ provider: "stripe", endpoint: "billing", eventId, eventType: "invoice.paid", attempt: 1 });

    const failed = await processClaim(db, first, processOptions(failingHandlers));
    expect(failed).toEqual({ outcome: "failed", error: "LedgerLockedError: Ledger is locked for the month-end close" });
    const afterFailure = await inboxRow(eventId);
    expect(afterFailure).toMatchObject({ attempts: 1, processed: false, outcome: null, needs_review: false, later: true });
    expect(afterFailure.last_error).toBe("LedgerLockedError: Ledger is locked for the month-end close");
    expect(afterFailure.last_error).not.toContain("cus_secret_marker");
    expect(await claimBatch(db, CLAIM)).toEqual([]); // backing off: not due
    expect(await count(db, "ledger_entries")).toBe(0);

    await makeDue(eventId);
    const retry = await claimOne();
    expect(retry.attempt).toBe(2);
    expect(await processClaim(db, retry, processOptions(billingHandlers))).toEqual({ outcome: "processed" });
    expect(await inboxRow(eventId)).toMatchObject({
      attempts: 2,
      processed: true,
      outcome: "processed",
      last_error: null,
      needs_review: false,
    });
    expect(await count(db, "ledger_entries")).toBe(1);
  });

  test("`processClaim()` of a worker whose lease expired is skipped, and its stale `recordFailures()` is fenced off by the attempt number", async () => {
    const [dbA, dbB] = connections(fresh.url, 2) as [Db, Db];
    try {
      const eventId = await queuePaid();
      const claimA = await claimOne(dbA); // A claims, then stalls
      expect(claimA.attempt).toBe(1);
      await db`update webhook_inbox set available_at = now() - interval '1 s' where event_id = ${eventId}`;
      const claimB = await claimOne(dbB);
      expect(claimB).toEqual({ ...claimA, attempt: 2, leaseEndsAt: claimB.leaseEndsAt });
      const leasedToB = await inboxRow(eventId);

      // A wakes up and reports a failure with its stale claim: B's lease must stay as it is.
      expect(await recordFailures(dbA, [{ claim: claimA, error: "Error: stale worker A" }], { maxAttempts: 10, backoff: BACKOFF })).toEqual(
        [false],
      );
      expect(await inboxRow(eventId)).toEqual(leasedToB);

      expect(await processClaim(dbB, claimB, processOptions(billingHandlers))).toEqual({ outcome: "processed" });
      expect(await processClaim(dbA, claimA, processOptions(billingHandlers))).toEqual({ outcome: "skipped" });
      expect(
        await recordFailures(dbA, [{ claim: claimA, error: "Error: stale worker A", permanent: true }], {
          maxAttempts: 10,
          backoff: BACKOFF,
        }),
      ).toEqual([false]);

      expect(await inboxRow(eventId)).toMatchObject({
        attempts: 2,
        processed: true,
        outcome: "processed",
        last_error: null,
        needs_review: false,
      });
      expect(await count(db, "ledger_entries")).toBe(1);
    } finally {
      await closeAll([dbA, dbB]);
    }
  });

  test(
    "`processClaim()` waits for a row another worker is processing, then skips it",
    async () => {
      const [dbA, dbB] = connections(fresh.url, 2) as [Db, Db];
      try {
        const eventId = await queuePaid();
        const claim = await claimOne();
        const [pidRowA] = await dbA<{ pid: number }[]>`select pg_backend_pid() as pid`;
        const [pidRowB] = await dbB<{ pid: number }[]>`select pg_backend_pid() as pid`;
        const pidA = pidRowA?.pid ?? -1;
        const pidB = pidRowB?.pid ?? -1;

        const order: string[] = [];
        let aHoldsRow = false;
        let releaseA = () => {};
        const bSeenWaiting = new Promise<void>((resolve) => {
          releaseA = resolve;
        });
        const slowBooking: HandlerTable = {
          "invoice.paid": async (tx, object, context) => {
            aHoldsRow = true; // the handler runs after the row's FOR UPDATE: A holds its lock now
            order.push("A holds the row");
            await tx`select pg_sleep(0.5)`;
            await bSeenWaiting; // A commits only after B was seen waiting on A's lock
            await bookPayment(tx, object, context);
          },
        };
        const a = processClaim(dbA, claim, processOptions(slowBooking)).then((r) => {
          order.push(`A ${r.outcome}`);
          return r;
        });
        await waitFor("A holding the row", () => aHoldsRow);
        const b = processClaim(dbB, claim, processOptions(billingHandlers)).then((r) => {
          order.push(`B ${r.outcome}`);
          return r;
        });
        const observed = waitFor("B blocked by A's row lock", async () => {
          const [row] = await db<{ blocked: boolean }[]>`select ${pidA}::int = any(pg_blocking_pids(${pidB}::int)) as blocked`;
          return row?.blocked === true;
        })
          .then(() => order.push("B waits for A"))
          .finally(releaseA);

        const [resultA, resultB] = await Promise.all([a, b, observed]);
        expect(resultA).toEqual({ outcome: "processed" });
        expect(resultB).toEqual({ outcome: "skipped" });
        // B waited on A's lock before A could commit. The last two entries may come in either order:
        // PostgreSQL releases A's lock (waking B) before A's client has read the commit's reply.
        expect(order.slice(0, 2)).toEqual(["A holds the row", "B waits for A"]);
        expect(order.slice(2).toSorted()).toEqual(["A processed", "B skipped"]);
        expect(await inboxRow(eventId)).toMatchObject({ attempts: 1, processed: true, outcome: "processed" });
        expect(await count(db, "ledger_entries")).toBe(1);
      } finally {
        await closeAll([dbA, dbB]);
      }
    },
    WAITS,
  );

  test("`processClaim()` fails a handler that outlives `statement_timeout` (57014) and leaves the row unprocessed", async () => {
    const eventId = await queuePaid();
    const sleeper: HandlerTable = {
      "invoice.paid": async (tx, object, context) => {
        await bookPayment(tx, object, context);
        await tx`select pg_sleep(1)`;
      },
    };
    const result = await processClaim(db, await claimOne(), processOptions(sleeper, { timeoutMs: 200 }));
    expect(result.outcome).toBe("failed");
    expect(result.error).toContain("57014");
    expect(result.error).toContain("statement timeout");
    const row = await inboxRow(eventId);
    expect(row).toMatchObject({ attempts: 1, processed: false, outcome: null, needs_review: false, later: true });
    expect(row.last_error).toBe(result.error ?? "");
    expect(await count(db, "ledger_entries")).toBe(0);
    expect(await count(db, "invoices")).toBe(0);
  });

  test("`processClaim()` parks a row as needs-review after `maxAttempts` failures; `claimBatch()` no longer returns it", async () => {
    const eventId = await queuePaid();
    const outcomes: string[] = [];
    for (let attempt = 1; attempt <= 3; attempt++) {
      const claim = await claimOne(db, { maxAttempts: 3 });
      expect(claim.attempt).toBe(attempt);
      outcomes.push((await processClaim(db, claim, processOptions(failingHandlers, { maxAttempts: 3 }))).outcome);
      await makeDue(eventId);
    }
    expect(outcomes).toEqual(["failed", "failed", "needs_review"]);
    expect(await claimBatch(db, { ...CLAIM, maxAttempts: 3 })).toEqual([]);
    expect(await claimBatch(db, { ...CLAIM, maxAttempts: 10 })).toEqual([]); // parked means parked, whatever the limit
    const row = await inboxRow(eventId);
    expect(row).toMatchObject({
      attempts: 3,
      processed: false,
      needs_review: true,
      last_error: "LedgerLockedError: Ledger is locked for the month-end close",
    });
  });

  test("`processClaim()` parks a PermanentError (billing payload without `customer`) after attempt 1", async () => {
    const eventId = await queuePaid({ customer: undefined });
    const result = await processClaim(db, await claimOne(), processOptions(billingHandlers));
    expect(result.outcome).toBe("needs_review");
    expect(result.error).toBe("PermanentError: Cannot apply invoice event: missing or invalid field(s) customer");
    expect(await inboxRow(eventId)).toMatchObject({ attempts: 1, processed: false, needs_review: true, last_error: result.error ?? "" });
    await makeDue(eventId);
    expect(await claimBatch(db, CLAIM)).toEqual([]);
    expect(await count(db, "ledger_entries")).toBe(0);
  });
});

describe("claimBatch()", () => {
  test("`claimBatch()` parks a due row whose attempts were all used by workers that died, instead of claiming it", async () => {
    const eventId = await queuePaid();
    const other = await queuePaid();
    await db`update webhook_inbox set attempts = 3, available_at = now() - interval '1 s' where event_id = ${eventId}`;
    await db`update webhook_inbox set available_at = now() where event_id = ${other}`;
    const claims = await claimBatch(db, { ...CLAIM, limit: 10, maxAttempts: 3 });
    expect(claims.map((c) => c.eventId)).toEqual([other]); // the healthy row is still claimed
    const row = await inboxRow(eventId);
    expect(row).toMatchObject({ attempts: 3, processed: false, needs_review: true });
    expect(row.last_error).toContain("attempt limit 3 reached");
    await makeDue(eventId);
    expect(await claimBatch(db, { ...CLAIM, limit: 10, maxAttempts: 3 })).toEqual([]);
  });

  test("`claimBatch()` claims each due row once across concurrent claimers (SKIP LOCKED)", async () => {
    const ids: string[] = [];
    for (let i = 0; i < 20; i++) ids.push(await queuePaid());
    const actors = connections(fresh.url, 4);
    try {
      const batches = await Promise.all(actors.map((a) => claimBatch(a, { ...CLAIM, limit: 10 })));
      const claimed = batches.flat().map((c) => c.eventId);
      expect(claimed.length).toBe(20);
      expect(new Set(claimed).size).toBe(20);
      expect(batches.flat().every((c) => c.attempt === 1)).toBe(true);
    } finally {
      await closeAll(actors);
    }
  });
});

describe("runWorker()", () => {
  test(
    "`runWorker()` processes 50 events with 4 workers, each attempted once",
    async () => {
      for (let i = 0; i < 50; i++) await queuePaid();
      const controller = new AbortController();
      const pools = Array.from({ length: 4 }, () => connect(fresh.url, { max: 2 }));
      const lines: Record<string, unknown>[] = [];
      const workers = pools.map((pool) => runWorker(workerOptions(pool, controller.signal, { log: (line) => lines.push(line) })));
      try {
        await waitFor("an empty backlog", async () => (await unprocessed()) === 0, 20_000);
      } finally {
        controller.abort();
        await Promise.all(workers);
        await closeAll(pools);
      }
      expect(await count(db, "ledger_entries")).toBe(50);
      expect(await count(db, "webhook_inbox", "processed_at is null")).toBe(0);
      expect(await count(db, "webhook_inbox", "attempts = 1 and outcome = 'processed'")).toBe(50);
      expect(lines.filter((l) => l.outcome === "processed").length).toBe(50);
      expect(lines.filter((l) => l.outcome !== "processed")).toEqual([]);
    },
    WAITS,
  );

  test(
    "`runWorker()` wakes on NOTIFY for a row queued while it is idle, well before its 30 s poll",
    async () => {
      const controller = new AbortController();
      const application = "worker-notify-test";
      const pool = connect(fresh.url, { max: 2, applicationName: application });
      const worker = runWorker(workerOptions(pool, controller.signal, { pollMs: 30_000 }));
      try {
        // Idle: LISTEN is on and the first (empty) claim has finished, so only a NOTIFY or the poll can wake it.
        await waitFor("the worker listening and idle", async () => {
          const [row] = await db<{ listening: number; claimed: number }[]>`
          select count(*) filter (where query ilike 'listen%')::int as listening,
                 count(*) filter (where query ilike '%with recursive walk%' and state = 'idle')::int as claimed
            from pg_stat_activity
           where application_name = ${application}
             and datname = current_database()
        `;
          return row?.listening === 1 && row.claimed >= 1;
        });
        const eventId = await queuePaid();
        await waitFor("the queued row processed", async () => (await inboxRow(eventId)).processed, 10_000);
        expect(await inboxRow(eventId)).toMatchObject({ attempts: 1, outcome: "processed" });
        expect(await count(db, "ledger_entries")).toBe(1);
      } finally {
        controller.abort();
        await worker;
        await pool.end({ timeout: 5 });
      }
    },
    WAITS,
  );

  test(
    "`runWorker()` resolves after abort only once the in-flight row is processed",
    async () => {
      const eventId = await queuePaid();
      const order: string[] = [];
      const slow: HandlerTable = {
        "invoice.paid": async (tx, object, context) => {
          order.push("handler started");
          await tx`select pg_sleep(0.5)`;
          await bookPayment(tx, object, context);
          order.push("handler finished");
        },
      };
      const controller = new AbortController();
      const pool = connect(fresh.url, { max: 2 });
      try {
        const worker = runWorker(workerOptions(pool, controller.signal, { tables: { stripe: slow }, pollMs: 30_000, listen: false }));
        await waitFor("the handler in flight", () => order.length > 0);
        controller.abort();
        order.push("aborted");
        await worker;
        order.push("runWorker resolved");
        expect(order).toEqual(["handler started", "aborted", "handler finished", "runWorker resolved"]);
        expect(await inboxRow(eventId)).toMatchObject({ attempts: 1, processed: true, outcome: "processed" });
        expect(await count(db, "ledger_entries")).toBe(1);
      } finally {
        controller.abort();
        await pool.end({ timeout: 5 });
      }
    },
    WAITS,
  );

  test(
    "`runWorker()` with its database unreachable logs `claim_failed` at level warn and keeps trying until aborted",
    async () => {
      const controller = new AbortController();
      // A port nothing listens on: every claim fails to connect.
      const gone = connect("postgres://nobody@127.0.0.1:1/none", { max: 1, connectTimeoutSec: 1 });
      const lines: Record<string, unknown>[] = [];
      const worker = runWorker(workerOptions(gone, controller.signal, { listen: false, log: (line) => lines.push(line) }));
      try {
        await waitFor("two failed claims", () => lines.filter((l) => l.worker === "claim_failed").length >= 2, 10_000);
      } finally {
        controller.abort();
        await worker;
        await gone.end({ timeout: 1 });
      }
      const failed = lines.filter((l) => l.worker === "claim_failed");
      expect(failed.every((l) => l.level === "warn" && typeof l.error === "string" && l.error.length > 0)).toBe(true);
    },
    WAITS,
  );
});

describe("receiveAsync() and receiveHybrid()", () => {
  test("`receiveAsync()` answers a duplicate of a still unprocessed event without touching the row", async () => {
    const { eventId, body } = paidEvent();
    expect(await receiveAsync(db, TARGET, verified(body))).toBe("queued");
    expect(await receiveAsync(db, TARGET, verified(body))).toBe("duplicate");
    expect(await count(db, "webhook_inbox")).toBe(1);
    expect(await inboxRow(eventId)).toMatchObject({ attempts: 0, processed: false, outcome: null, last_error: null, needs_review: false });
    expect(await count(db, "ledger_entries")).toBe(0);
  });

  test("`receiveHybrid()` processes in the request when the handler succeeds", async () => {
    const { eventId, body } = paidEvent();
    expect(await receiveHybrid(db, TARGET, verified(body), { budgetMs: 2_000, backoff: BACKOFF })).toBe("processed");
    expect(await inboxRow(eventId)).toMatchObject({ attempts: 0, processed: true, outcome: "processed", last_error: null });
    expect(await count(db, "ledger_entries")).toBe(1);
  });

  test(
    "`receiveHybrid()` queues a failed attempt (attempts 1, last_error) that a worker then processes",
    async () => {
      const { eventId, body } = paidEvent();
      const fallbacks: unknown[] = [];
      const outcome = await receiveHybrid(
        db,
        { ...TARGET, handlers: failingHandlers },
        verified(body),
        { budgetMs: 2_000, backoff: BACKOFF },
        (err) => fallbacks.push(err),
      );
      expect(outcome).toBe("queued");
      expect(fallbacks.length).toBe(1);
      expect(fallbacks[0]).toBeInstanceOf(LedgerLockedError);
      expect(await inboxRow(eventId)).toMatchObject({
        attempts: 1,
        processed: false,
        needs_review: false,
        later: true,
        last_error: "LedgerLockedError: Ledger is locked for the month-end close",
      });
      expect(await count(db, "ledger_entries")).toBe(0);

      await makeDue(eventId);
      const controller = new AbortController();
      const pool = connect(fresh.url, { max: 2 });
      const worker = runWorker(workerOptions(pool, controller.signal, { listen: false }));
      try {
        await waitFor("the worker processing the hybrid fallback", async () => (await inboxRow(eventId)).processed);
      } finally {
        controller.abort();
        await worker;
        await pool.end({ timeout: 5 });
      }
      expect(await inboxRow(eventId)).toMatchObject({ attempts: 2, outcome: "processed", last_error: null });
      expect(await count(db, "ledger_entries")).toBe(1);
    },
    WAITS,
  );

  test("`receiveHybrid()` queues a handler slower than its budget with nothing of the attempt committed", async () => {
    const { eventId, body } = paidEvent();
    const slow: HandlerTable = {
      "invoice.paid": async (tx, object, context) => {
        await bookPayment(tx, object, context);
        await tx`select pg_sleep(0.3)`;
      },
    };
    expect(await receiveHybrid(db, { ...TARGET, handlers: slow }, verified(body), { budgetMs: 100, backoff: BACKOFF })).toBe("queued");
    const row = await inboxRow(eventId);
    expect(row).toMatchObject({ attempts: 1, processed: false, needs_review: false });
    expect(row.last_error).toContain("57014");
    expect(await count(db, "ledger_entries")).toBe(0);
    expect(await count(db, "invoices")).toBe(0);
    expect(await count(db, "outbox")).toBe(0);
  });

  test(
    "`receiveHybrid()` queues a delivery whose handler waits on a lock past its budget, with nothing of the attempt committed",
    async () => {
      const { eventId, body } = paidEvent();
      let release!: () => void;
      const released = new Promise<void>((resolve) => (release = resolve));
      let locked!: () => void;
      const isLocked = new Promise<void>((resolve) => (locked = resolve));
      const holder = connect(fresh.url, { max: 1 });
      const holding = holder.begin(async (tx) => {
        await tx`lock table ledger_entries in access exclusive mode`;
        locked();
        await released;
      });
      try {
        await isLocked;
        expect(await receiveHybrid(db, TARGET, verified(body), { budgetMs: 200, backoff: BACKOFF })).toBe("queued");
      } finally {
        release();
        await holding;
        await holder.end({ timeout: 5 });
      }
      const row = await inboxRow(eventId);
      expect(row).toMatchObject({ attempts: 1, processed: false, needs_review: false });
      expect(row.last_error).toContain("57014");
      expect(await count(db, "ledger_entries")).toBe(0);
      expect(await count(db, "invoices")).toBe(0);
    },
    WAITS,
  );

  test("`receiveHybrid()` parks a PermanentError as needs-review at once and answers needs_review", async () => {
    const { eventId, body } = paidEvent({ customer: undefined });
    expect(await receiveHybrid(db, TARGET, verified(body), { budgetMs: 2_000, backoff: BACKOFF })).toBe("needs_review");
    const row = await inboxRow(eventId);
    expect(row).toMatchObject({ attempts: 1, processed: false, needs_review: true });
    expect(row.last_error).toContain("PermanentError");
    await makeDue(eventId);
    expect(await claimBatch(db, CLAIM)).toEqual([]);
    expect(await count(db, "ledger_entries")).toBe(0);
  });
});

describe("createApp() in async and hybrid mode", () => {
  const URL_BILLING = "http://receiver.test/webhooks/stripe/billing";

  function billingEndpoint(overrides: Partial<Endpoint>): Endpoint {
    const [base] = stripeEndpoints([{ name: "billing", secrets: [SECRET] }]);
    if (!base) throw new Error("stripeEndpoints() returned no endpoint");
    return { ...base, ...overrides };
  }

  test("`createApp()` answers 200 queued in async mode and leaves the row to a worker", async () => {
    const lines: Record<string, unknown>[] = [];
    const app = createApp({ db, endpoints: [billingEndpoint({ mode: "async" })], log: (line) => lines.push(line) });
    const { eventId, body } = paidEvent();
    const response = await app.fetch(await signedRequest(URL_BILLING, body));
    expect(response.status).toBe(200);
    expect(await response.json()).toEqual({ outcome: "queued", event_id: eventId });
    expect(await inboxRow(eventId)).toMatchObject({ attempts: 0, processed: false });
    expect(await count(db, "ledger_entries")).toBe(0);
    expect(lines).toEqual([expect.objectContaining({ outcome: "queued", status: 200 })]);
  });

  test("`createApp()` answers 200 queued in hybrid mode when the handler fails", async () => {
    const lines: Record<string, unknown>[] = [];
    const app = createApp({
      db,
      endpoints: [billingEndpoint({ mode: "hybrid", handlers: failingHandlers })],
      log: (line) => lines.push(line),
    });
    const { eventId, body } = paidEvent({ customer: "cus_secret_marker" });
    const response = await app.fetch(await signedRequest(URL_BILLING, body));
    expect(response.status).toBe(200);
    expect(await response.json()).toEqual({ outcome: "queued", event_id: eventId });
    expect(await inboxRow(eventId)).toMatchObject({
      attempts: 1,
      processed: false,
      last_error: "LedgerLockedError: Ledger is locked for the month-end close",
    });
    expect(lines).toEqual([
      expect.objectContaining({ outcome: "queued", status: 200, fallback: "LedgerLockedError: Ledger is locked for the month-end close" }),
    ]);
    expect(JSON.stringify(lines)).not.toContain("cus_secret_marker");
  });
});
