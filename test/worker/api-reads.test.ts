// Rows the worker must read from Stripe's API first (thin notifications, refetch endpoints): a read
// counts against the claim's lease, and a read that keeps failing backs off ever longer and is parked
// for an operator after a bound (review of bf4a976, R3 and R8). The API is a stub: these tests are about
// the worker's leases, attempts and deferrals, not about stripe-node (but for the last test: the real
// reader against an address where nothing listens).
import { afterAll, beforeEach, expect, test } from "bun:test";
import { connect, type Db } from "../../src/db/db.ts";
import { handlerTable } from "../../src/handlers/handler-table.ts";
import { thinHandlerTable } from "../../src/handlers/stripe-thin.ts";
import { inboxRow, insertInbox } from "../../src/inbox/inbox.ts";
import { thinSubject } from "../../src/providers/stripe-thin.ts";
import { claimBatch } from "../../src/worker/claim.ts";
import { MAX_DEFERS, processClaim } from "../../src/worker/process-claim.ts";
import { freePort } from "../../src/runtime/embedded-postgres.ts";
import { stripeApiClient } from "../../src/stripe-api/client.ts";
import { stripeFetcher, type Fetcher } from "../../src/worker/stripe-fetch.ts";
import { runWorker } from "../../src/worker/worker.ts";
import { count, freshDatabase } from "../support/helpers.ts";
import { waitUntil } from "../support/wait-until.ts";

const fresh = await freshDatabase();
const db = fresh.db;
const pools: Db[] = [];
afterAll(async () => {
  await Promise.all(pools.map((p) => p.end({ timeout: 5 })));
  await fresh.drop();
});
beforeEach(async () => {
  await db`truncate webhook_inbox, stripe_change_claims`;
  await db`create table if not exists thing_runs (event_id text not null)`;
  await db`truncate thing_runs`;
});

/** Classic `thing.happened` → a row per run; as a thin endpoint's table, `v1.thing.happened` claiming its change. */
const tables = {
  "stripe-thin": thinHandlerTable(
    handlerTable({ "thing.happened": async (tx, _object, context) => void (await tx`insert into thing_runs values (${context.eventId})`) }),
  ),
};

/** Records `n` thin notifications `v1.thing.happened` for the worker, as the receiver would. */
async function thinRows(n: number): Promise<void> {
  for (let i = 0; i < n; i++) {
    const id = `evt_test_api_${i}`;
    const payload = {
      id,
      object: "v2.core.event",
      type: "v1.thing.happened",
      created: new Date().toISOString(),
      livemode: false,
      related_object: { id: `thg_${i}`, type: "thing", url: `/v1/things/thg_${i}` },
    };
    const event = { id, type: payload.type, payload, subject: thinSubject(payload), body: JSON.stringify(payload) };
    await insertInbox(db, [inboxRow({ provider: "stripe-thin", endpoint: "thin", eventId: id }, event, null)]);
  }
}

/** A stub of the Stripe API reader: every read takes `delayMs`, then answers the object or `failure`. */
function stubFetcher(delayMs: number, failure?: unknown): Fetcher & { reads: string[] } {
  const reads: string[] = [];
  return {
    reads,
    needsFetch: (claim) => claim.provider === "stripe-thin",
    async resolve(claim) {
      reads.push(claim.eventId);
      await Bun.sleep(delayMs);
      if (failure) throw failure;
      return { kind: "apply", object: { id: `thg_${claim.eventId}`, object: "thing" }, changeId: claim.eventId };
    },
  };
}

// The times are doubled from the review's (250 ms reads, a 1 s lease): beside other test files on two cores a
// row's own statements took long enough to let a 1 s lease run out. The ratio is what the test is about: a
// worker that claimed all 16 reads at once would start the last ones 2 s (four reads) after their claim.
test("`runWorker()` ×2 with API reads of 500 ms, a 2 s lease and 2 attempts processes 16 thin rows each read once, none parked (review R8)", async () => {
  await thinRows(16);
  const fetcher = stubFetcher(500);
  const workers = [0, 1].map(() => {
    const pool = connect(fresh.url, { max: 5 });
    pools.push(pool);
    const controller = new AbortController();
    const done = runWorker({
      db: pool,
      tables,
      fetcher,
      signal: controller.signal,
      concurrency: 4,
      leaseMs: 2_000,
      timeoutMs: 600,
      maxAttempts: 2,
      pollMs: 20,
      listen: false,
      log: () => {},
    });
    return { controller, done };
  });
  try {
    await waitUntil(
      "every thin row settled or parked",
      async () => (await count(db, "webhook_inbox", "processed_at is null and needs_review_at is null")) === 0,
      {
        timeoutMs: 20_000,
      },
    );
  } finally {
    for (const w of workers) w.controller.abort();
    await Promise.all(workers.map((w) => w.done));
  }
  expect(await count(db, "webhook_inbox", "needs_review_at is not null")).toBe(0);
  expect(await count(db, "webhook_inbox", "outcome = 'processed' and attempts = 1")).toBe(16);
  expect(fetcher.reads.length).toBe(16);
  expect(await count(db, "thing_runs")).toBe(16);
});

test("`processClaim()` defers a row whose API read keeps failing: its attempt given back, each wait longer than the last up to the cap, parked after MAX_DEFERS (review R3)", async () => {
  await thinRows(1);
  const fetcher = stubFetcher(0, Object.assign(new Error("Stripe is down"), { statusCode: 503 }));
  const options = { tables, fetcher, timeoutMs: 5_000, maxAttempts: 3, backoff: { baseMs: 1_000, capMs: 16_000 } };
  const waits: number[] = [];
  const outcomes: string[] = [];
  for (let i = 0; i < MAX_DEFERS + 2; i++) {
    const [claim] = await claimBatch(db, { limit: 1, leaseMs: 60_000, maxAttempts: 3 });
    if (!claim) break;
    outcomes.push((await processClaim(db, claim, options)).outcome);
    const [row] = await db<{ wait_ms: number }[]>`
      select extract(epoch from available_at - now())::float8 * 1000 as wait_ms from webhook_inbox`;
    waits.push(row!.wait_ms);
    await db`update webhook_inbox set available_at = now()`; // due again at once, for the test
  }
  expect(outcomes).toEqual([...Array(MAX_DEFERS - 1).fill("deferred"), "needs_review"]);
  const [row] = await db`select attempts, defers, needs_review_at is not null as parked, last_error from webhook_inbox`;
  expect(row).toMatchObject({ attempts: 0, defers: MAX_DEFERS, parked: true });
  expect(String(row?.last_error)).toContain(`deferred ${MAX_DEFERS} times in a row: parked`);
  // Backoff with jitter in [0.5, 1): 1 s, 2 s, 4 s, 8 s, then the 16 s cap.
  const expected = [1_000, 2_000, 4_000, 8_000, 16_000, 16_000];
  for (const [i, base] of expected.entries()) {
    expect(waits[i]!).toBeGreaterThanOrEqual(base * 0.5 - 50);
    expect(waits[i]!).toBeLessThan(base + 50);
  }
  expect(fetcher.reads.length).toBe(MAX_DEFERS);
});

test("`processClaim()` with stripeFetcher() and nothing listening at STRIPE_API_BASE defers the row, naming that host:port in last_error", async () => {
  await thinRows(1);
  const port = await freePort(); // free a moment ago: nothing listens there
  const apiBase = new URL(`http://127.0.0.1:${port}`);
  const fetcher = stripeFetcher({
    stripe: stripeApiClient({ apiKey: "sk_test_apireadsapireads", apiBase }),
    refetchEndpoints: new Set(),
    retry: { attempts: 2, baseMs: 1, maxMs: 2 },
    apiBase,
  });
  const [claim] = await claimBatch(db, { limit: 1, leaseMs: 60_000, maxAttempts: 3 });
  const result = await processClaim(db, claim!, {
    tables,
    fetcher,
    timeoutMs: 5_000,
    maxAttempts: 3,
    backoff: { baseMs: 1_000, capMs: 16_000 },
  });
  expect(result.outcome).toBe("deferred");
  const [row] = await db`select attempts, defers, last_error from webhook_inbox`;
  expect(row).toEqual({
    attempts: 0,
    defers: 1,
    last_error: `Stripe API unavailable, retried later without using an attempt: Cannot connect to the Stripe API at 127.0.0.1:${port} (STRIPE_API_BASE): connection refused (ECONNREFUSED)`,
  });
});

test("`processClaim()` parks a row whose API read Stripe refuses with 401, its last_error saying so without Stripe's message (which quotes the masked key)", async () => {
  await thinRows(1);
  // Stripe's own 401 body names the key, masked but for its last characters.
  const stub = Bun.serve({
    port: 0,
    hostname: "127.0.0.1",
    fetch: () =>
      Response.json({ error: { type: "invalid_request_error", message: "Invalid API Key provided: sk_test_****WXYZ" } }, { status: 401 }),
  });
  try {
    const apiBase = new URL(`http://127.0.0.1:${stub.port}`);
    const fetcher = stripeFetcher({
      stripe: stripeApiClient({ apiKey: "sk_test_apireadsapiWXYZ", apiBase }),
      refetchEndpoints: new Set(),
      retry: { attempts: 1, baseMs: 1, maxMs: 2 },
      apiBase,
    });
    const [claim] = await claimBatch(db, { limit: 1, leaseMs: 60_000, maxAttempts: 3 });
    const result = await processClaim(db, claim!, {
      tables,
      fetcher,
      timeoutMs: 5_000,
      maxAttempts: 3,
      backoff: { baseMs: 1_000, capMs: 16_000 },
    });
    expect(result.outcome).toBe("needs_review");
    const [row] = await db<{ last_error: string }[]>`select last_error from webhook_inbox`;
    expect(row!.last_error).toContain("401");
    expect(row!.last_error).not.toContain("WXYZ");
  } finally {
    stub.stop(true);
  }
});
