// processBatch() against real PostgreSQL: several claimed rows share one commit; a failing, refused,
// slow or already-finished row never costs another row its outcome; two workers' batches over the
// same invoices take locks in one order. One connection per concurrent actor.
import { afterAll, beforeEach, describe, expect, test } from "bun:test";
import { claimBatch, type Claim } from "../../src/worker/claim.ts";
import { closeAll, connections, count, eventBody, freshDatabase, invoice, verified } from "../support/helpers.ts";
import type { Db } from "../../src/db/db.ts";
import { statementHandler, type HandlerTable, type Step, type StepsBuilder } from "../../src/handlers/handler-table.ts";
import { billingHandlers } from "../../src/handlers/billing.ts";
import { processBatch, type BatchResult } from "../../src/worker/process-batch.ts";
import { processClaimed, type ProcessOptions } from "../../src/worker/process-claimed.ts";
import { receiveAsync, type ReceiveTarget } from "../../src/receiver/receive.ts";

const fresh = await freshDatabase();
const db = fresh.db;
// The table the extra steps below write: billing's own steps already write invoices, ledger_entries and
// outbox, and a second step writing one of them is refused.
await db`create table batch_test_marks (note text)`;
afterAll(() => fresh.drop());
beforeEach(async () => {
  await db`truncate webhook_inbox, outbox, ledger_entries, invoices`;
});

const TARGET: ReceiveTarget = { provider: "stripe", endpoint: "billing", handlers: billingHandlers };
const BACKOFF = { baseMs: 60_000, capMs: 600_000 };
const WAITS = 30_000;

function options(handlers: HandlerTable = billingHandlers, overrides: Partial<ProcessOptions> = {}): ProcessOptions {
  return { handlersFor: () => handlers, timeoutMs: 5_000, maxAttempts: 10, backoff: BACKOFF, ...overrides };
}

/** Queues one event for `invoiceId` in async mode; returns its event id. */
async function queue(eventId: string, type: string, invoiceId: string, overrides: Record<string, unknown> = {}): Promise<string> {
  const body = eventBody(eventId, type, invoice({ id: invoiceId, amount_paid: 2000, status: "paid", ...overrides }));
  expect(await receiveAsync(db, TARGET, verified(body))).toBe("queued");
  return eventId;
}

async function claimAll(claimDb: Db = db, limit = 100): Promise<Claim[]> {
  return claimBatch(claimDb, { limit, leaseMs: 60_000, maxAttempts: 10 });
}

const outcomes = (results: BatchResult[]) =>
  Object.fromEntries(
    results.map((r) => [r.claim.eventId, { outcome: r.outcome, batched: r.batched, ...(r.error ? { error: r.error } : {}) }]),
  );

type Sql = Parameters<StepsBuilder>[0];

/** Wraps billing's invoice.paid steps so that the events in `poison` also run `extra` (a data-modifying step). */
function withExtra(poison: string | string[], extra: (sql: Sql) => Step): HandlerTable {
  const build = billingHandlers["invoice.paid"]?.steps;
  if (!build) throw new Error("billing's invoice.paid has no steps");
  return {
    ...billingHandlers,
    "invoice.paid": statementHandler("bookPayment+extra", (sql, object, context, helpers) =>
      [poison].flat().includes(context.eventId)
        ? { ...build(sql, object, context, helpers), extra: extra(sql) }
        : build(sql, object, context, helpers),
    ),
  };
}

describe("processBatch()", () => {
  test("`processBatch()` applies six rows in ONE commit: a paid and a payment_succeeded of one invoice book once, a type without a handler is ignored", async () => {
    await queue("evt_b_created", "invoice.created", "in_b_1", { status: "draft", amount_paid: 0 });
    await queue("evt_b_paid", "invoice.paid", "in_b_1");
    await queue("evt_b_succeeded", "invoice.payment_succeeded", "in_b_1");
    await queue("evt_b_other", "invoice.paid", "in_b_2");
    await queue("evt_b_third", "invoice.paid", "in_b_3");
    await queue("evt_b_finalized", "invoice.finalized", "in_b_4", { status: "open", amount_paid: 0 });
    const claims = await claimAll();
    expect(claims).toHaveLength(6);

    // The handler table changed since the row was queued: invoice.finalized has no handler any more.
    const { "invoice.finalized": _, ...withoutFinalized } = billingHandlers;
    const results = await processBatch(db, claims, options(withoutFinalized));
    expect(outcomes(results)).toEqual({
      evt_b_created: { outcome: "processed", batched: true },
      evt_b_paid: { outcome: "processed", batched: true },
      evt_b_succeeded: { outcome: "processed", batched: true },
      evt_b_other: { outcome: "processed", batched: true },
      evt_b_third: { outcome: "processed", batched: true },
      evt_b_finalized: { outcome: "ignored", batched: true },
    });
    // One transaction wrote every row's processed_at: they share one xmin.
    const [tx] = await db<{ n: number; settled: number }[]>`
      select count(distinct xmin::text)::int as n, count(*) filter (where processed_at is not null)::int as settled from webhook_inbox
    `;
    expect(tx).toEqual({ n: 1, settled: 6 });
    expect(await count(db, "ledger_entries")).toBe(3);
    expect(await count(db, "ledger_entries", "invoice_id = 'in_b_1'")).toBe(1);
    expect(await count(db, "outbox")).toBe(3);
    expect(await count(db, "webhook_inbox", "event_id = 'evt_b_finalized' and outcome = 'ignored'")).toBe(1);
    expect(await count(db, "invoices", "id = 'in_b_4'")).toBe(0);
  });

  test("`processBatch()` redoes each row on its own when one statement fails: the others are processed, the failing one records its error", async () => {
    for (const n of [1, 2, 3, 4]) await queue(`evt_f_${n}`, "invoice.paid", `in_f_${n}`);
    const handlers = withExtra(
      "evt_f_3",
      (sql) => sql`insert into batch_test_marks (note) select (select 'poison' from generate_series(1, 2)) from inbox returning 1`,
    );
    const results = await processBatch(db, await claimAll(), options(handlers));
    expect(outcomes(results)).toEqual({
      evt_f_1: { outcome: "processed", batched: false },
      evt_f_2: { outcome: "processed", batched: false },
      evt_f_3: {
        outcome: "failed",
        batched: false,
        error: "PostgresError 21000: more than one row returned by a subquery used as an expression",
      },
      evt_f_4: { outcome: "processed", batched: false },
    });
    // Every redone row says why its batch rolled back (the worker logs it as batch_error).
    expect(results.map((r) => r.batchError)).toEqual(
      Array(4).fill("PostgresError 21000: more than one row returned by a subquery used as an expression"),
    );
    expect(await count(db, "ledger_entries")).toBe(3);
    expect(await count(db, "ledger_entries", "invoice_id = 'in_f_3'")).toBe(0);
    expect(await count(db, "invoices", "id = 'in_f_3'")).toBe(0);
    // The redo did not count another attempt; the failure is recorded with a backoff.
    expect(
      await count(
        db,
        "webhook_inbox",
        "event_id = 'evt_f_3' and attempts = 1 and processed_at is null and last_error like '%21000%' and available_at > now()",
      ),
    ).toBe(1);
  });

  test("`processBatch()` parks a row its handler refuses (no customer) on its own; the others still share a commit", async () => {
    await queue("evt_r_1", "invoice.paid", "in_r_1");
    await queue("evt_r_refused", "invoice.paid", "in_r_2", { customer: null });
    await queue("evt_r_3", "invoice.paid", "in_r_3");
    const results = await processBatch(db, await claimAll(), options());
    expect(outcomes(results)).toEqual({
      evt_r_1: { outcome: "processed", batched: true },
      evt_r_refused: { outcome: "needs_review", batched: false, error: expect.stringContaining("customer") },
      evt_r_3: { outcome: "processed", batched: true },
    });
    expect(await count(db, "ledger_entries")).toBe(2);
    expect(await count(db, "webhook_inbox", "event_id = 'evt_r_refused' and needs_review_at is not null")).toBe(1);
  });

  test("`processBatch()` parks at once a requeued raw-body row (jsonb could not hold it) of a type without a handler, instead of retrying it", async () => {
    await queue("evt_raw_1", "invoice.paid", "in_raw_1");
    await db`
      insert into webhook_inbox (provider, endpoint, event_id, event_type, payload, raw_body, attempts)
      values ('stripe', 'billing', 'evt_raw_plan', 'plan.created', null, '{"id":"evt_raw_plan"}', 0)
    `;
    const results = await processBatch(db, await claimAll(), options());
    expect(outcomes(results)).toEqual({
      evt_raw_1: { outcome: "processed", batched: false },
      evt_raw_plan: {
        outcome: "needs_review",
        batched: false,
        error:
          "PermanentError: Cannot process: the event has no jsonb payload and its raw body holds no \\u0000 or lone surrogate to replace (a number out of range or nesting too deep?); resolve it by hand",
      },
    });
  });

  test("`processBatch()` skips a row another worker finished after the claim, and books nothing twice", async () => {
    for (const n of [1, 2, 3]) await queue(`evt_s_${n}`, "invoice.paid", `in_s_${n}`);
    const claims = await claimAll();
    const stolen = claims.find((c) => c.eventId === "evt_s_2");
    if (!stolen) throw new Error("evt_s_2 was not claimed");
    expect(await processClaimed(db, stolen, options())).toEqual({ outcome: "processed" });
    const results = await processBatch(db, claims, options());
    expect(outcomes(results)).toEqual({
      evt_s_1: { outcome: "processed", batched: true },
      evt_s_2: { outcome: "skipped", batched: true },
      evt_s_3: { outcome: "processed", batched: true },
    });
    expect(await count(db, "ledger_entries")).toBe(3);
  });

  test(
    "`processBatch()` bounds a whole batch by `timeoutMs`: a slow row's batch is cancelled and redone row by row, only the slow row fails",
    async () => {
      for (const n of [1, 2, 3]) await queue(`evt_t_${n}`, "invoice.paid", `in_t_${n}`);
      const handlers = withExtra(
        "evt_t_2",
        (sql) => sql`insert into batch_test_marks (note) select pg_sleep(1.5)::text from inbox returning 1`,
      );
      const results = await processBatch(db, await claimAll(), options(handlers, { timeoutMs: 300 }));
      expect(outcomes(results)).toEqual({
        evt_t_1: { outcome: "processed", batched: false },
        evt_t_2: { outcome: "failed", batched: false, error: expect.stringContaining("57014") },
        evt_t_3: { outcome: "processed", batched: false },
      });
      // batched: false shows the batch's cancel fired (unbounded, the 1.5 s sleep would have completed and
      // committed the batch); 57014 shows the row's own bound fired too.
      expect(await count(db, "ledger_entries")).toBe(2);
    },
    WAITS,
  );

  test(
    "`processBatch()` keeps the whole call within `timeoutMs` when two rows of the batch are stuck (a batch must not outlive its lease)",
    async () => {
      for (const n of [1, 2, 3, 4]) await queue(`evt_l_${n}`, "invoice.paid", `in_l_${n}`);
      const handlers = withExtra(
        ["evt_l_1", "evt_l_3"],
        (sql) => sql`insert into batch_test_marks (note) select pg_sleep(3)::text from inbox returning 1`,
      );
      const started = performance.now();
      const results = await processBatch(db, await claimAll(), options(handlers, { timeoutMs: 1_200 }));
      const elapsed = performance.now() - started;
      expect(outcomes(results)).toEqual({
        evt_l_1: { outcome: "failed", batched: false, error: expect.stringContaining("57014") },
        evt_l_2: { outcome: "processed", batched: false },
        evt_l_3: { outcome: "failed", batched: false, error: expect.stringContaining("57014") },
        evt_l_4: { outcome: "processed", batched: false },
      });
      // The contract, not a speed goal: one budget for the shared attempt and every redo. Giving each redo
      // the full timeout again would take 0.6 + 2 × 1.2 s here.
      expect(elapsed).toBeLessThan(2_400);
    },
    WAITS,
  );

  test(
    "`processBatch()` ×2 on two connections over the same ten invoices, claimed in opposite orders, never deadlock and book each payment once",
    async () => {
      const ids = Array.from({ length: 10 }, (_, i) => `in_d_${String(i).padStart(2, "0")}`);
      for (const id of ids) await queue(`evt_d_paid_${id}`, "invoice.paid", id);
      const [dbA, dbB] = connections(fresh.url, 2) as [Db, Db];
      try {
        const paid = (await claimAll(dbA)).reverse();
        for (const id of ids) await queue(`evt_d_succ_${id}`, "invoice.payment_succeeded", id);
        const succeeded = await claimAll(dbB);
        expect([paid.length, succeeded.length]).toEqual([10, 10]);
        const [a, b] = await Promise.all([processBatch(dbA, paid, options()), processBatch(dbB, succeeded, options())]);
        // A deadlock would abort one batch (SQLSTATE 40P01) and show up as rows redone on their own.
        expect([...a, ...b].filter((r) => !r.batched).map((r) => r.claim.eventId)).toEqual([]);
        expect([...a, ...b].every((r) => r.outcome === "processed")).toBe(true);
        expect(await count(db, "ledger_entries")).toBe(10);
        expect(await count(db, "invoices", "status = 'paid' and amount_paid = 2000")).toBe(10);
      } finally {
        await closeAll([dbA, dbB]);
      }
    },
    WAITS,
  );
});
