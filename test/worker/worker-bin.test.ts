// `bun run worker` as a real process: every settings problem listed at once, naming flag and variable;
// an unreachable Stripe API at start; two --no-listen (poll-only) workers sharing one inbox.
import { afterAll, expect, test } from "bun:test";
import type { Subprocess } from "bun";
import { join } from "node:path";
import { freePort } from "../../src/runtime/embedded-postgres.ts";
import { billingHandlers } from "../../src/handlers/billing.ts";
import { receiveAsync } from "../../src/receiver/receive.ts";
import { spawnBun, waitForLine, type Running } from "../support/bun-child.ts";
import { eventBody, freshDatabase, invoice, verified } from "../support/helpers.ts";
import { waitUntil } from "../support/wait-until.ts";
import { tcpGate } from "../runtimes/tcp-gate.ts";

const ROOT = join(import.meta.dir, "..", "..");

test("`bun run worker` lists every settings problem at once (attempts, lease vs timeout, concurrency, batch), naming each variable, and exits 2", async () => {
  const child = Bun.spawn([process.execPath, join(ROOT, "src", "bin", "worker.ts"), "--max-attempts", "0"], {
    cwd: ROOT,
    // No DATABASE_URL needed: settings are checked before any database is opened.
    env: {
      PATH: process.env.PATH ?? "",
      WORKER_LEASE_MS: "1000",
      WORKER_TIMEOUT_MS: "5000",
      WORKER_CONCURRENCY: "two",
      WORKER_BATCH: "65",
    },
    stdin: "ignore",
    stdout: "pipe",
    stderr: "pipe",
    timeout: 20_000,
  });
  const [stderr, code] = await Promise.all([new Response(child.stderr).text(), child.exited]);
  expect(code).toBe(2);
  expect(stderr).toContain('--max-attempts (WORKER_MAX_ATTEMPTS) must be a whole number ≥ 1, got "0"');
  expect(stderr).toContain("--timeout-ms (5000) must be shorter than --lease-ms (1000)");
  expect(stderr).toContain('--concurrency (WORKER_CONCURRENCY) must be a whole number ≥ 1, got "two"');
  expect(stderr).toContain('--batch (WORKER_BATCH) must be a whole number from 1 to 64, got "65"');
}, 30_000);

const tracked = new Set<Subprocess>();
afterAll(() => {
  for (const child of tracked) child.kill("SIGKILL");
});

test("`bun run worker` with nothing listening at STRIPE_API_BASE says at start it cannot connect to that host:port (never the key), and starts", async () => {
  const database = await freshDatabase();
  try {
    const port = await freePort(); // free a moment ago: nothing listens there
    const key = "sk_test_workerworker123";
    const worker = spawnBun(
      ["src/bin/worker.ts", "--poll-ms", "100"],
      {
        PATH: process.env.PATH,
        DATABASE_URL: database.url,
        STRIPE_ENDPOINTS: "events",
        STRIPE_ENDPOINT_KIND_EVENTS: "thin",
        STRIPE_API_KEY: key,
        STRIPE_API_BASE: `http://127.0.0.1:${port}`,
      },
      tracked,
    );
    await waitForLine(worker, '{"worker":"started"', 30_000);
    worker.child.kill("SIGTERM");
    expect(await worker.child.exited).toBe(0);
    const stderr = await worker.stderr;
    expect(stderr).toContain(
      `webhook-inbox worker: Cannot connect to the Stripe API at 127.0.0.1:${port} (STRIPE_API_BASE): connection refused (ECONNREFUSED); starting anyway`,
    );
    expect(stderr).not.toContain(key);
  } finally {
    await database.drop();
  }
}, 60_000);

test("two `bun run worker --no-listen` processes never LISTEN, drain async rows by polling alone, and process each row once (attempt 1, one ledger entry, one outbox row)", async () => {
  const database = await freshDatabase();
  const target = { provider: "stripe", endpoint: "billing", handlers: billingHandlers };
  const queue = async (from: number, n: number) => {
    for (let i = from; i < from + n; i++) {
      const body = eventBody(`evt_poll_${i}`, "invoice.paid", invoice({ id: `in_poll_${i}`, amount_paid: 2000, status: "paid" }));
      expect(await receiveAsync(database.db, target, verified(body))).toBe("queued");
    }
  };
  const processed = async () =>
    (await database.db<{ n: number }[]>`select count(*)::int as n from webhook_inbox where processed_at is not null`)[0]?.n;
  const workers: Running[] = [];
  try {
    await queue(0, 10); // waiting before the workers start
    // One row at a time each, polling every 50 ms: while one works, the other's poll finds the next row.
    for (let i = 0; i < 2; i++)
      workers.push(
        spawnBun(
          ["src/bin/worker.ts", "--no-listen", "--poll-ms", "50", "--concurrency", "1"],
          { PATH: process.env.PATH, DATABASE_URL: database.url },
          tracked,
        ),
      );
    for (const w of workers) expect(JSON.parse(await waitForLine(w, '{"worker":"started"', 30_000))).toMatchObject({ listen: false });
    await waitUntil("the first 10 rows processed", async () => (await processed()) === 10, { timeoutMs: 20_000, intervalMs: 50 });
    // Queued while both are idle: no NOTIFY reaches them (none is listened for), only their polls find these.
    await queue(10, 40);
    await waitUntil("all 50 rows processed", async () => (await processed()) === 50, { timeoutMs: 30_000, intervalMs: 50 });
    // Both pools are connected and neither ever ran LISTEN (a listening worker's connection shows `listen …`).
    const [activity] = await database.db<{ connections: number; listening: number }[]>`
      select count(*)::int as connections, count(*) filter (where query ilike 'listen%')::int as listening
        from pg_stat_activity
       where datname = current_database()
         and application_name = 'webhook-inbox worker'
    `;
    expect(activity?.connections).toBeGreaterThanOrEqual(2);
    expect(activity?.listening).toBe(0);
    for (const w of workers) w.child.kill("SIGTERM");
    for (const w of workers) expect(await w.child.exited).toBe(0);
    await Promise.all(workers.map((w) => w.stdoutDone));
    // Each row claimed once (attempts 1) and applied once; the two workers' logs name disjoint rows that cover all 50.
    const [rows] = await database.db<{ rows: number; once: number; ledger: number; invoices: number; outbox: number }[]>`
      select (select count(*)::int from webhook_inbox) as rows,
             (select count(*)::int from webhook_inbox where attempts = 1 and outcome = 'processed') as once,
             (select count(*)::int from ledger_entries where kind = 'payment') as ledger,
             (select count(distinct invoice_id)::int from ledger_entries where kind = 'payment') as invoices,
             (select count(*)::int from outbox where event_type = 'InvoicePaymentBooked') as outbox
    `;
    expect(rows).toEqual({ rows: 50, once: 50, ledger: 50, invoices: 50, outbox: 50 });
    const byWorker = workers.map(
      (w) =>
        new Set(w.lines.filter((l) => l.includes('"outcome":"processed"')).map((l) => (JSON.parse(l) as { event_id: string }).event_id)),
    );
    const [a = new Set<string>(), b = new Set<string>()] = byWorker;
    expect([...a].filter((id) => b.has(id))).toEqual([]);
    expect(a.size + b.size).toBe(50);
    expect(Math.min(a.size, b.size)).toBeGreaterThan(0);
  } finally {
    for (const w of workers) if (w.child.exitCode === null) w.child.kill("SIGKILL");
    await database.drop();
  }
}, 90_000);

test("`bun run worker` whose database stops answering mid-query gives up on the claim at --timeout-ms + STUCK_SLACK_MS (logged, never a hang) and ends after SIGTERM with exit 0", async () => {
  const database = await freshDatabase();
  const gate = await tcpGate(database.url);
  await gate.open();
  try {
    const worker = spawnBun(
      ["src/bin/worker.ts", "--no-listen", "--poll-ms", "50", "--timeout-ms", "1000", "--lease-ms", "2000"],
      { PATH: process.env.PATH, DATABASE_URL: gate.url, FAILOVER_CHECK_MS: "0" },
      tracked,
    );
    await waitForLine(worker, '{"worker":"started"', 30_000);
    // Its claims running on a connection already open (seen past the gate): the worker's first claim and
    // its first heartbeat start together and one of them opens a second connection; frozen during that
    // connect, a claim would fail as a connect timeout instead of being sent and never answered.
    await waitUntil(
      "the worker claiming on an open connection",
      async () =>
        (
          await database.db`
            select 1 from pg_stat_activity
             where datname = current_database() and application_name = 'webhook-inbox worker' and query like '%with recursive walk%'
          `
        ).length > 0,
      { timeoutMs: 15_000 },
    );
    gate.freeze(); // the next claim is sent and never answered
    await Bun.sleep(300);
    const signalledAt = Date.now();
    worker.child.kill("SIGTERM");
    // A bound on a hang, not a speed assertion: without the claim's bound the loop waits forever and only
    // the stop bound (--timeout-ms + 10 s) ends the process, with exit 1.
    const code = await Promise.race([worker.child.exited, Bun.sleep(40_000).then(() => "still running" as const)]);
    expect(code).toBe(0);
    expect(Date.now() - signalledAt).toBeLessThan(1_000 + 10_000);
    const lines = worker.lines.filter((l) => l.startsWith("{")).map((l) => JSON.parse(l) as Record<string, unknown>);
    expect(lines.find((l) => l.worker === "claim_failed")?.error).toContain("had no answer from PostgreSQL");
    expect(lines.find((l) => l.worker === "stop_timeout")).toBeUndefined();
  } finally {
    await gate.shut();
    await database.drop();
  }
}, 60_000);
