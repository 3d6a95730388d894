// Fairness between connected accounts (issue 37): the claim walks due rows group by group (endpoint and
// account, sql/0030's due index), interleaves the accounts, steps over paused endpoints and accounts at
// their bound; the worker holds at most `accountMax` rows of one connected account. The flood test
// prints the trickle's latency (docs/operations.md, "A bad day", states it); its only timed check is a
// sanity bound relative to the flood's own drain time.
import { afterAll, beforeEach, describe, expect, test } from "bun:test";
import { connect, type Db } from "../../src/db/db.ts";
import { billingHandlers } from "../../src/handlers/billing.ts";
import { insertInbox } from "../../src/inbox/inbox.ts";
import { claimBatch, type ClaimOptions, type ClaimWalk } from "../../src/worker/claim.ts";
import { defaultAccountMax, DEFAULT_BATCH, runWorker } from "../../src/worker/worker.ts";
import { count, eventBody, freshDatabase, inboxRowFor, invoice } from "../support/helpers.ts";
import { waitUntil } from "../support/wait-until.ts";

const fresh = await freshDatabase();
const db = fresh.db;
afterAll(() => fresh.drop());
beforeEach(async () => {
  await db`truncate webhook_inbox, webhook_inbox_payloads, endpoint_pauses, outbox, ledger_entries, invoices`;
});

const CLAIM: ClaimOptions = { limit: 32, leaseMs: 60_000, maxAttempts: 10 };
let seq = 0;

/**
 * Queues `n` invoice.paid events of `account` at `endpoint` (each its own invoice, 2000 usd), as async
 * receive records them, in statements of 1,000 rows, oldest first; returns their event ids.
 */
async function queue(account: string, n: number, endpoint = "billing"): Promise<string[]> {
  const ids: string[] = [];
  for (let done = 0; done < n; done += 1_000) {
    const rows = Array.from({ length: Math.min(1_000, n - done) }, () => {
      const eventId = `evt_fair_${++seq}`;
      ids.push(eventId);
      const body = eventBody(eventId, "invoice.paid", invoice({ id: `in_fair_${seq}`, amount_paid: 2000, status: "paid" }));
      return inboxRowFor({ provider: "stripe", endpoint, eventId }, { type: "invoice.paid", payload: body, account });
    });
    await insertInbox(db, rows);
  }
  return ids;
}

async function claim(options: Partial<ClaimOptions> = {}): Promise<{ accounts: Record<string, number>; walk: ClaimWalk }> {
  let walk: ClaimWalk | undefined;
  const claims = await claimBatch(db, { ...CLAIM, ...options, onWalk: (w) => (walk = w) });
  const accounts: Record<string, number> = {};
  for (const c of claims) accounts[c.account] = (accounts[c.account] ?? 0) + 1;
  return { accounts, walk: walk! };
}

describe("claimBatch() between accounts", () => {
  test("`claimBatch()` gives every account's oldest rows before a flooding account's next ones, at most its share each", async () => {
    await queue("acct_flood", 500);
    for (const a of ["acct_a", "acct_b", "acct_c"]) await queue(a, 1);
    await queue("", 3); // the platform's own events take their turn too
    // Five groups share a claim of 10: at most 2 rows each; the worker claims again at once for the rest.
    const first = await claim({ limit: 10 });
    expect(first.accounts).toEqual({ acct_flood: 2, acct_a: 1, acct_b: 1, acct_c: 1, "": 2 });
    expect(first.walk).toEqual({ more: true, capped: false });
    const second = await claim({ limit: 10 });
    expect(second.accounts).toEqual({ acct_flood: 5, "": 1 });
    expect(await count(db, "webhook_inbox", "attempts > 0 and account = 'acct_flood'")).toBe(7);
  });

  test("`claimBatch()` claims an account's rows oldest first", async () => {
    const statements = [];
    for (let i = 0; i < 4; i++) statements.push(await queue("acct_flood", 10)); // four arrivals, each its own due time
    const claims = await claimBatch(db, { ...CLAIM, limit: 10 });
    expect(claims.map((c) => c.eventId).sort()).toEqual(statements[0]!.sort());
  });

  test("`claimBatch()` takes no row of an account at its bound, says so, and takes others'", async () => {
    await queue("acct_flood", 100);
    await queue("acct_a", 3);
    const held = new Map([["acct_flood", 64]]);
    const { accounts, walk } = await claim({ accounts: { max: 64, held } });
    expect(accounts).toEqual({ acct_a: 3 });
    expect(walk).toEqual({ more: false, capped: true });
    const next = await claim({ accounts: { max: 64, held: new Map([["acct_flood", 60]]) } });
    expect(next.accounts).toEqual({ acct_flood: 4 });
    expect(next.walk).toEqual({ more: false, capped: true });
  });

  test("`claimBatch()` bounds connected accounts only: the platform's own rows fill the claim", async () => {
    await queue("", 40);
    const { accounts, walk } = await claim({ accounts: { max: 1, held: new Map([["", 500]]) } });
    expect(accounts).toEqual({ "": 32 });
    expect(walk.more).toBe(true);
  });

  test("`claimBatch()` steps over a paused endpoint and a paused account, and claims them again after resume", async () => {
    await queue("acct_a", 2, "ledger");
    await queue("acct_b", 2, "ledger");
    await queue("acct_a", 2, "billing");
    await queue("acct_b", 2, "billing");
    await db`insert into endpoint_pauses (endpoint, account) values ('ledger', ''), ('billing', 'acct_b')`;
    expect((await claim()).accounts).toEqual({ acct_a: 2 });
    expect(await count(db, "webhook_inbox", "attempts > 0 and endpoint = 'billing' and account = 'acct_a'")).toBe(2);
    expect(await count(db, "webhook_inbox", "attempts > 0")).toBe(2);
    await db`delete from endpoint_pauses`;
    expect((await claim()).accounts).toEqual({ acct_a: 2, acct_b: 4 });
  });

  test("`claimBatch()` walks at most `max(limit ÷ 4, 16)` groups and starts the next walk after the last", async () => {
    for (let i = 10; i < 30; i++) await queue(`acct_${i}`, 1);
    const first = await claim({ limit: 16 });
    expect(Object.keys(first.accounts).sort()).toEqual(Array.from({ length: 16 }, (_, i) => `acct_${i + 10}`));
    expect(first.walk).toEqual({ more: true, capped: false, stoppedAt: { provider: "stripe", endpoint: "billing", account: "acct_25" } });
    const second = await claim({ limit: 16, after: first.walk.stoppedAt! });
    expect(Object.keys(second.accounts).sort()).toEqual(["acct_26", "acct_27", "acct_28", "acct_29"]);
    // It began after a group: the groups before it were not looked at, so the next claim starts over.
    expect(second.walk).toEqual({ more: true, capped: false });
    await queue("acct_10", 1);
    const third = await claim({ limit: 16 });
    expect(third).toEqual({ accounts: { acct_10: 1 }, walk: { more: false, capped: false } });
  });
});

describe("runWorker() with one account flooding", () => {
  test("`runWorker()` applies nine trickling accounts' events while one account's 10,000 wait, holding at most `accountMax` of them", async () => {
    const concurrency = 4;
    const accountMax = defaultAccountMax(concurrency, DEFAULT_BATCH);
    const flood = await queue("acct_flood", 10_000);
    const trickling = Array.from({ length: 9 }, (_, i) => `acct_trickle_${i + 1}`);

    const pool = connect(fresh.url, { max: concurrency + 1, applicationName: "fairness worker" });
    const controller = new AbortController();
    const started = performance.now();
    const worker = runWorker({
      db: pool,
      tables: { stripe: billingHandlers },
      signal: controller.signal,
      concurrency,
      pollMs: 50,
      log: () => {},
    });
    // Sample how many rows of the flooding account are leased (claimed, not settled) while it drains.
    let mostHeld = 0;
    let sampling = true;
    const sampler = (async () => {
      const probe = connect(fresh.url, { max: 1 });
      try {
        while (sampling) {
          const [row] = await probe<{ n: number }[]>`
              select count(*)::int as n from webhook_inbox
               where account = 'acct_flood' and processed_at is null and available_at > now()
            `;
          mostHeld = Math.max(mostHeld, row!.n);
          await Bun.sleep(5);
        }
      } finally {
        await probe.end({ timeout: 5 });
      }
    })();
    const trickle: string[] = [];
    try {
      // Each trickling account queues one event every 150 ms, 15 times: all while the flood is thousands deep.
      for (let round = 0; round < 15; round++) {
        for (const account of trickling) trickle.push(...(await queue(account, 1)));
        await Bun.sleep(150);
      }
      await waitUntil("every row processed", async () => (await count(db, "webhook_inbox", "processed_at is null")) === 0, {
        timeoutMs: 240_000,
        intervalMs: 50,
      });
    } finally {
      sampling = false;
      controller.abort();
      await Promise.all([worker, sampler]);
      await pool.end({ timeout: 5 });
    }
    const floodSeconds = (performance.now() - started) / 1000;

    // Every event booked once, on its first attempt.
    expect(await count(db, "webhook_inbox", "outcome = 'processed' and attempts = 1")).toBe(flood.length + trickle.length);
    expect(await count(db, "ledger_entries")).toBe(flood.length + trickle.length);
    expect(mostHeld).toBeGreaterThan(0);
    expect(mostHeld).toBeLessThanOrEqual(accountMax);

    // Per trickling event: its wait, and how many of the flood's rows were applied meanwhile (a FIFO
    // claim applies every flood row queued before it first: thousands).
    const waits = await db<{ ms: number; passed: number }[]>`
        select extract(epoch from t.processed_at - t.received_at)::float8 * 1000 as ms,
               (select count(*)::int from webhook_inbox f
                 where f.account = 'acct_flood' and f.processed_at > t.received_at and f.processed_at < t.processed_at) as passed
          from webhook_inbox t
         where t.event_id = any(${trickle}::text[])
         order by 1
      `;
    const ms = waits.map((w) => w.ms);
    const at = (q: number) => ms[Math.min(ms.length - 1, Math.floor(q * ms.length))]!;
    const passed = Math.max(...waits.map((w) => w.passed));
    console.log(
      `fairness: 10,000 events of one account drained in ${floodSeconds.toFixed(1)} s (${Math.round(flood.length / floodSeconds)}/s, ` +
        `${concurrency} slots, batches of ${DEFAULT_BATCH}, at most ${mostHeld} of its rows held, bound ${accountMax}); ` +
        `${trickle.length} events of 9 trickling accounts waited p50 ${at(0.5).toFixed(0)} ms, p95 ${at(0.95).toFixed(0)} ms, ` +
        `max ${at(1).toFixed(0)} ms, at most ${passed} flood rows applied while one waited`,
    );
    expect(passed).toBeLessThanOrEqual(2 * concurrency * DEFAULT_BATCH);
    // A sanity bound, relative to the machine's own speed: a trickling event waits a small part of the drain.
    expect(at(0.95) / 1000).toBeLessThan(floodSeconds / 4);
  }, 300_000);
});
