// Rebuild after a handler fix (issue 37): recorded events of a window run again through today's
// handlers, through replay's path (applyEvent's `replay` hold), each in one transaction with the run's
// checkpoint. A rebuild after a handler change books what was missing and nothing twice; a rebuild
// SIGKILLed mid-run (the real CLI, a real kill) continues and ends in the state an uninterrupted run
// reaches; payloads retention dropped are listed, not run; a pause stops the run; the rate is a bound.
import { afterAll, beforeEach, describe, expect, test } from "bun:test";
import { join } from "node:path";
import type { Db } from "../../src/db/db.ts";
import { billingHandlers } from "../../src/handlers/billing.ts";
import { PermanentError, type HandlerTable } from "../../src/handlers/handler-table.ts";
import { stripeHandlers } from "../../src/handlers/stripe-money.ts";
import { pauseEndpoint, resumeEndpoint } from "../../src/ops/pause.ts";
import {
  countRebuild,
  findRebuild,
  notRebuildable,
  runRebuild,
  startRebuild,
  type Rebuild,
  type RebuildWindow,
} from "../../src/ops/rebuild.ts";
import { receiveSync, type ReceiveTarget } from "../../src/receiver/receive.ts";
import { count, eventBody, freshDatabase, invoice, verified } from "../support/helpers.ts";
import { MONEY_OUT_END_STATE, moneyOut, moneyOutState } from "../support/money-out.ts";
import { waitUntil } from "../support/wait-until.ts";

const fresh = await freshDatabase();
const db = fresh.db;
const control = await freshDatabase();
afterAll(() => Promise.all([fresh.drop(), control.drop()]));
const MONEY_TABLES =
  "webhook_inbox, webhook_inbox_payloads, outbox, ledger_entries, invoices, stripe_charges, invoice_payments, refunds, disputes";
beforeEach(async () => {
  for (const d of [db, control.db]) await d.unsafe(`truncate ${MONEY_TABLES}, endpoint_pauses, inbox_rebuilds, stripe_change_claims`);
});

const BILLING: ReceiveTarget = { provider: "stripe", endpoint: "billing", handlers: stripeHandlers };
const TODAY = () => stripeHandlers;
const REPO = join(import.meta.dir, "..", "..");
const WAITS = 120_000;

/** The window of everything received in the last hour (and a few seconds ahead). */
function lastHour(filters: Partial<RebuildWindow> = {}): RebuildWindow {
  return { since: new Date(Date.now() - 3_600_000), until: new Date(Date.now() + 5_000), ...filters };
}

/** Starts and runs a rebuild of `window` to its end with today's handlers (in-process). */
async function rebuild(on: Db, window: RebuildWindow, tables = TODAY, args: Record<string, string | null> = { since: "1h" }) {
  const counts = await countRebuild(on, window, tables);
  const run = await startRebuild(on, args, window, counts.toRun);
  return { counts, outcome: await runRebuild(on, run, { tables, ratePerSec: 10_000, owner: `test:${Math.random()}` }) };
}

/** The Stripe table as it was before the refund and dispute handlers were written: their events were recorded `ignored`. */
const beforeTheFix: HandlerTable = Object.fromEntries(
  Object.entries(stripeHandlers).filter(([type]) => !type.startsWith("refund.") && !type.startsWith("charge.dispute.")),
);

describe("runRebuild()", () => {
  test("a rebuild after a handler change books what the old handlers missed and nothing twice, as if the fix had always been there", async () => {
    for (const e of moneyOut()) await receiveSync(db, { ...BILLING, handlers: beforeTheFix }, verified(e.body));
    expect(await count(db, "webhook_inbox", "outcome = 'ignored'")).toBe(9);
    expect(await count(db, "ledger_entries", "kind <> 'payment'")).toBe(0);
    for (const e of moneyOut()) await receiveSync(control.db, BILLING, verified(e.body));

    const { counts, outcome } = await rebuild(db, lastHour());
    expect(counts).toEqual({ rows: 20, toRun: 20, noHandler: 0, payloadDropped: 0, leftAlone: {} });
    expect(outcome).toMatchObject({ status: "done", failures: [], rebuild: { total: 20, done: 20, failed: 0 } });
    expect(outcome.rebuild.inserted).toBeGreaterThan(0);
    expect(await moneyOutState(db)).toEqual(MONEY_OUT_END_STATE);
    expect(await moneyOutState(db)).toEqual(await moneyOutState(control.db));

    // Again: a new run (the first finished) through the same handlers changes nothing.
    const ledgerBefore = await db`select * from ledger_entries order by id`;
    const outboxBefore = await count(db, "outbox");
    const again = await rebuild(db, lastHour());
    expect(again.outcome).toMatchObject({ status: "done", rebuild: { done: 20, failed: 0 } });
    expect(again.outcome.rebuild.id).not.toBe(outcome.rebuild.id);
    expect(await db`select * from ledger_entries order by id`).toEqual(ledgerBefore);
    expect(await count(db, "outbox")).toBe(outboxBefore);
  });

  test("`countRebuild()` and `notRebuildable()` sort the window: payloads retention dropped are listed, not run; open rows are left alone", async () => {
    const events = Array.from({ length: 6 }, (_, i) =>
      verified(eventBody(`evt_rb_${i}`, "invoice.paid", invoice({ id: `in_rb_${i}`, amount_paid: 2000, status: "paid" }))),
    );
    for (const e of events) await receiveSync(db, BILLING, e);
    await receiveSync(db, BILLING, verified(eventBody("evt_rb_plan", "plan.created", { id: "plan_1", object: "plan" })));
    // Retention dropped two payloads; one row waits for the worker, one for an operator.
    await db`delete from webhook_inbox_payloads where event_id in ('evt_rb_0', 'evt_rb_1')`;
    await db`update webhook_inbox set processed_at = null, outcome = null where event_id = 'evt_rb_2'`;
    await db`update webhook_inbox set processed_at = null, outcome = null, needs_review_at = now() where event_id = 'evt_rb_3'`;

    const window = lastHour();
    expect(await countRebuild(db, window, TODAY)).toEqual({
      rows: 7,
      toRun: 2,
      noHandler: 1,
      payloadDropped: 2,
      leftAlone: { unprocessed: 1, needs_review: 1 },
    });
    expect((await notRebuildable(db, window, 10)).map((r) => r.eventId).sort()).toEqual(["evt_rb_0", "evt_rb_1"]);
    expect(await countRebuild(db, lastHour({ eventType: "plan.created" }), TODAY)).toMatchObject({ rows: 1, toRun: 0, noHandler: 1 });
    expect(await countRebuild(db, lastHour({ endpoint: "other" }), TODAY)).toMatchObject({ rows: 0 });
    const { outcome } = await rebuild(db, window);
    expect(outcome.rebuild).toMatchObject({ total: 2, done: 2 });
  });

  test("an event today's handler refuses is rolled back, counted failed and listed; the run goes on", async () => {
    for (let i = 0; i < 4; i++)
      await receiveSync(
        db,
        { ...BILLING, handlers: {} },
        verified(eventBody(`evt_rf_${i}`, "invoice.paid", invoice({ id: `in_rf_${i}`, amount_paid: 2000, status: "paid" }))),
      );
    const refusing: HandlerTable = {
      "invoice.paid": async (tx, object, ctx) => {
        if (ctx.eventId === "evt_rf_1") throw new PermanentError("Cannot book in_rf_1: refused for the test");
        await billingHandlers["invoice.paid"]!(tx, object, ctx);
      },
    };
    const { outcome } = await rebuild(db, lastHour(), () => refusing);
    expect(outcome.status).toBe("done");
    expect(outcome.rebuild).toMatchObject({ total: 4, done: 4, failed: 1 });
    expect(outcome.failures).toEqual([
      expect.objectContaining({ eventId: "evt_rf_1", error: expect.stringContaining("refused for the test") }) as never,
    ]);
    expect(await count(db, "ledger_entries")).toBe(3);
    expect(await count(db, "webhook_inbox", "event_id = 'evt_rf_1' and outcome = 'ignored'")).toBe(1);
    // Kept with the run, not only in this process's memory: a run continued by another process lists it too.
    const [kept] = await db<{ failures: { eventId: string }[] }[]>`select failures from inbox_rebuilds where id = ${outcome.rebuild.id}`;
    expect(kept!.failures.map((f) => f.eventId)).toEqual(["evt_rf_1"]);
  });

  test("a paused endpoint stops the run where it was; after resume the same run continues to the end", async () => {
    for (let i = 0; i < 5; i++)
      await receiveSync(
        db,
        { ...BILLING, handlers: {} },
        verified(eventBody(`evt_rp_${i}`, "invoice.paid", invoice({ id: `in_rp_${i}`, amount_paid: 2000, status: "paid" }))),
      );
    await pauseEndpoint(db, { endpoint: "billing" });
    const window = lastHour();
    const run = await startRebuild(db, { since: "1h" }, window, (await countRebuild(db, window, TODAY)).toRun);
    const stopped = await runRebuild(db, run, { tables: TODAY, ratePerSec: 1_000, owner: "test:a" });
    expect(stopped).toMatchObject({ status: "paused", rebuild: { done: 0 } });
    expect(stopped.reason).toContain("Endpoint billing is paused");
    await resumeEndpoint(db, { endpoint: "billing" });
    const resumed = (await findRebuild(db, { since: "1h" })) as Rebuild;
    expect(resumed.id).toBe(run.id);
    const done = await runRebuild(db, resumed, { tables: TODAY, ratePerSec: 1_000, owner: "test:b" });
    expect(done).toMatchObject({ status: "done", rebuild: { done: 5 } });
    expect(await count(db, "ledger_entries")).toBe(5);
  });

  test("`runRebuild()` runs at most `ratePerSec` events a second, and stops at the next event when aborted", async () => {
    for (let i = 0; i < 20; i++)
      await receiveSync(
        db,
        { ...BILLING, handlers: {} },
        verified(eventBody(`evt_rr_${i}`, "invoice.paid", invoice({ id: `in_rr_${i}`, amount_paid: 2000, status: "paid" }))),
      );
    const window = lastHour();
    const run = await startRebuild(db, { since: "1h" }, window, 20);
    const stop = new AbortController();
    const started = performance.now();
    const outcome = await runRebuild(db, run, {
      tables: TODAY,
      ratePerSec: 20,
      owner: "test:rate",
      signal: stop.signal,
      onProgress: (p) => void (p.done === 10 && stop.abort()),
    });
    // Ten events at 20 a second take at least 9 intervals of 50 ms (a lower bound: load only adds to it).
    expect(performance.now() - started).toBeGreaterThanOrEqual(450);
    expect(outcome).toMatchObject({ status: "interrupted", rebuild: { done: 10 } });
    expect(await count(db, "ledger_entries")).toBe(10);
    const [lease] = await db<{ owner: string | null }[]>`select lease_owner as owner from inbox_rebuilds where id = ${run.id}`;
    expect(lease?.owner).toBeNull(); // given back: the next run need not wait
  });
});

describe("bun run inbox rebuild", () => {
  function spawnRebuild(args: string[], url: string) {
    return Bun.spawn([process.execPath, "src/bin/inbox.ts", "rebuild", ...args], {
      cwd: REPO,
      env: { ...process.env, DATABASE_URL: url },
      stdout: "pipe",
      stderr: "pipe",
      timeout: 60_000,
    });
  }
  async function run(args: string[], url = fresh.url) {
    const proc = spawnRebuild(args, url);
    const [stdout, stderr] = await Promise.all([new Response(proc.stdout).text(), new Response(proc.stderr).text(), proc.exited]);
    return { code: proc.exitCode, stdout, stderr };
  }

  /** 240 invoice.paid events recorded `ignored` (no handler then) in `on`: today's table books each. */
  async function recordIgnored(on: Db) {
    for (let i = 0; i < 240; i++)
      await receiveSync(
        on,
        { ...BILLING, handlers: {} },
        verified(
          eventBody(
            `evt_rk_${i}`,
            "invoice.paid",
            invoice({ id: `in_rk_${i}`, amount_due: 2000 + i, amount_paid: 2000 + i, status: "paid" }),
          ),
        ),
      );
  }

  async function endState(on: Db) {
    const rows = async (query: Promise<readonly object[]>) => [...(await query)];
    return {
      ledger: await rows(on`select invoice_id, kind, amount::int, currency from ledger_entries order by invoice_id, kind`),
      invoices: await rows(on`select id, status, amount_paid::int from invoices order by id`),
      outbox: await rows(on`select event_type, aggregate_id, count(*)::int as n from outbox group by 1, 2 order by 1, 2`),
      inbox: await rows(on`select state, count(*)::int as n from webhook_inbox_state group by 1 order by 1`),
      run: await rows(
        on`select total, done, failed, inserted::int, updated::int, deleted::int, finished_at is not null as finished from inbox_rebuilds`,
      ),
    };
  }

  test(
    "a rebuild SIGKILLed mid-run continues where it stopped and ends in the state an uninterrupted run reaches",
    async () => {
      await recordIgnored(db);
      await recordIgnored(control.db);
      await rebuild(control.db, lastHour(), TODAY, { since: "1h", until: null, endpoint: null, type: null, account: null });

      const child = spawnRebuild(["--since", "1h", "--rate", "40"], fresh.url);
      await waitUntil("the rebuild 40 events in", async () => (await count(db, "inbox_rebuilds", "done >= 40")) === 1, {
        timeoutMs: 30_000,
      });
      child.kill("SIGKILL");
      await child.exited;
      const [killed] = await db<{ done: number }[]>`select done from inbox_rebuilds`;
      expect(killed!.done).toBeLessThan(240);
      expect(await count(db, "ledger_entries")).toBe(killed!.done);

      const resumed = await run(["--since", "1h", "--rate", "400"]);
      expect({ code: resumed.code, stderr: resumed.stderr.includes("Error") }).toEqual({ code: 0, stderr: false });
      expect(resumed.stdout).toMatch(new RegExp(`\\(rebuild \\d+, started [^:]+:\\d\\d:[\\d.]+Z: ${killed!.done} of 240 done\\)`));
      expect(resumed.stdout).toContain("finished: 240 of 240 event(s) gone through, 0 failed");
      const state = await endState(db);
      expect(state).toEqual(await endState(control.db));
      expect(state.run).toEqual([expect.objectContaining({ total: 240, done: 240, failed: 0, finished: true }) as never]);
      expect(state.ledger).toHaveLength(240);
      expect(state.inbox).toEqual([{ state: "processed", n: 240 }]);
    },
    WAITS,
  );

  test(
    "`inbox rebuild --dry-run --json` counts and lists without starting a run; a window without --since or backwards is a usage error",
    async () => {
      await recordIgnored(db);
      await db`delete from webhook_inbox_payloads where event_id = 'evt_rk_7'`;
      const dry = await run(["--since", "1h", "--dry-run", "--json"]);
      expect({ code: dry.code, stderr: dry.stderr }).toEqual({ code: 0, stderr: "" });
      expect(JSON.parse(dry.stdout)).toMatchObject({
        dryRun: true,
        counts: { rows: 240, toRun: 239, noHandler: 0, payloadDropped: 1, leftAlone: {} },
        notRebuildable: [expect.objectContaining({ eventId: "evt_rk_7", endpoint: "billing", eventType: "invoice.paid" })],
      });
      expect(await count(db, "inbox_rebuilds")).toBe(0);
      const text = await run(["--since", "1h", "--dry-run"]);
      expect(text.stdout).toContain("not rebuildable: payload dropped by retention");
      expect(text.stdout).toContain("evt_rk_7");
      expect((await run(["--until", "1h"])).code).toBe(2);
      expect((await run(["--since", "1h", "--until", "2h"])).code).toBe(2);
      expect((await run(["--since", "1h", "--rate", "0"])).code).toBe(2);
    },
    WAITS,
  );
});
