// A connection that stops answering mid-query (a half-open socket after a failover, or the driver losing a
// query while it reconnects: docs/failover.md) must not stop the worker or hang a delivery: each database
// call gives up at its own bound plus STUCK_SLACK_MS (src/db/db.ts settleWithin) as a transient failure, and
// the work goes on over the pool's other connections. The gate freezes the connections open at that moment
// and lets new ones through, as a failover leaves the old primary's sockets half-open.
import { afterAll, expect, test } from "bun:test";
import { connect, isDatabaseUnavailable, STUCK_SLACK_MS } from "../../src/db/db.ts";
import { billingHandlers } from "../../src/handlers/billing.ts";
import { receiveAsync, receiveSync, type ReceiveTarget } from "../../src/receiver/receive.ts";
import { runWorker } from "../../src/worker/worker.ts";
import { count, eventBody, freshDatabase, invoice, verified } from "../support/helpers.ts";
import { waitUntil } from "../support/wait-until.ts";
import { tcpGate } from "../runtimes/tcp-gate.ts";

const fresh = await freshDatabase();
const gate = await tcpGate(fresh.url);
await gate.open();
afterAll(async () => {
  await gate.shut();
  await fresh.drop();
});
const TARGET: ReceiveTarget = { provider: "stripe", endpoint: "billing", handlers: billingHandlers };
const paid = (n: number) =>
  verified(eventBody(`evt_stuck_${n}`, "invoice.paid", invoice({ id: `in_stuck_${n}`, amount_paid: 2000, status: "paid" })));

test("`runWorker()` whose open connections stop answering mid-query gives up on them at the bound and drains every row over new ones", async () => {
  const lines: Record<string, unknown>[] = [];
  const workerDb = connect(gate.url, { max: 6 });
  const stop = new AbortController();
  const done = runWorker({
    db: workerDb,
    tables: { stripe: billingHandlers },
    signal: stop.signal,
    concurrency: 2,
    listen: false,
    pollMs: 50,
    timeoutMs: 500,
    leaseMs: 2_000,
    backoff: { baseMs: 100, capMs: 200 },
    log: (line) => void lines.push(line),
  });
  try {
    expect(await receiveAsync(fresh.db, TARGET, paid(0))).toBe("queued");
    await waitUntil("the first row processed", async () => (await count(fresh.db, "ledger_entries")) === 1, { timeoutMs: 10_000 });
    // Two idle connections open in the worker's pool, then frozen: the pool hands an idle open connection out
    // first, so the worker's next claim surely goes out on one that never answers.
    await Promise.all([workerDb`select pg_sleep(0.05)`, workerDb`select pg_sleep(0.05)`]);
    gate.freezeOpen();
    for (let n = 1; n <= 4; n++) expect(await receiveAsync(fresh.db, TARGET, paid(n))).toBe("queued");
    await waitUntil("every row processed once", async () => (await count(fresh.db, "ledger_entries")) === 5, { timeoutMs: 75_000 });
    expect(await count(fresh.db, "webhook_inbox", "processed_at is not null")).toBe(5);
    expect(lines.some((l) => String(l.error).includes("had no answer from PostgreSQL"))).toBe(true);
  } finally {
    stop.abort();
    await done;
    await workerDb.end({ timeout: 0 }).catch(() => {});
  }
}, 120_000);

test("a sync delivery whose connection stops answering fails within its timeout plus STUCK_SLACK_MS as the database unavailable (a 503), and commits nothing", async () => {
  const db = connect(gate.url, { max: 1 });
  try {
    await db`select 1`;
    gate.freezeOpen();
    const started = Date.now();
    const err = await receiveSync(db, TARGET, paid(100), 500).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(Date.now() - started).toBeLessThan(500 + STUCK_SLACK_MS + 3_000);
    expect((err as { code?: string } | undefined)?.code).toBe("QUERY_STUCK");
    expect(isDatabaseUnavailable(err)).toBe(true);
    expect(await count(fresh.db, "webhook_inbox", "event_id = 'evt_stuck_100'")).toBe(0);
  } finally {
    await db.end({ timeout: 0 }).catch(() => {});
  }
}, 30_000);
