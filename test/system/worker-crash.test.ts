// Real process kills (seed §6: "claim, then crash, three times with a limit of 3"): worker child
// processes of test/system/worker-children/ are SIGKILLed in the middle of an attempt, and the real worker
// entry file drains a fixture backlog and stops on SIGTERM. Only processes this file spawned are
// signalled, by pid; afterAll kills any still running.
import { spawnBun as spawnChild, waitForLine, type Running } from "../support/bun-child.ts";
import { afterAll, beforeEach, expect, test } from "bun:test";
import { join } from "node:path";
import type { Subprocess } from "bun";
import { createApp, type Endpoint } from "../../src/receiver/app.ts";
import { claimBatch } from "../../src/worker/claim.ts";
import { mulberry32, shuffleInPlace } from "../../src/dev/random.ts";
import { stripeEndpoints } from "../../src/receiver/endpoints.ts";
import { billingHandlers } from "../../src/handlers/billing.ts";
import { connect } from "../../src/db/db.ts";
import { receiveAsync, receiveSync } from "../../src/receiver/receive.ts";
import { count, eventBody, freshDatabase, invoice, lifecycle, SECRET, signedRequest, verified } from "../support/helpers.ts";

const HANGING_WORKER = join(import.meta.dir, "worker-children", "hanging-worker.ts");
const BIN_WORKER = join(import.meta.dir, "worker-children", "bin-worker.ts");
const BUSY_WORKER = join(import.meta.dir, "worker-children", "busy-worker.ts");
const POISON_WORKER = join(import.meta.dir, "worker-children", "poison-worker.ts");
/** Per-test limit: each test starts several Bun processes and waits on them with bounded waits. */
const CHILDREN = 60_000;

const fresh = await freshDatabase();
const db = fresh.db;

type Child = Subprocess<"ignore", "pipe", "pipe">;

const running = new Set<Child>();

afterAll(async () => {
  await Promise.all([...running].map((child) => stop(child, "SIGKILL")));
  await fresh.drop();
});
beforeEach(async () => {
  await db`truncate webhook_inbox, outbox, ledger_entries, invoices`;
});

/** Starts `bun <script> …args` in the repository root and collects its stdout line by line. */
function spawnBun(script: string, args: string[], env: Record<string, string | undefined> = process.env): Running {
  return spawnChild([script, ...args], env, running as Set<Subprocess>);
}

/** Sends `signal` to the child by its pid unless it already exited; waits for its exit. */
async function stop(child: Child, signal: "SIGKILL" | "SIGTERM"): Promise<void> {
  if (child.exitCode === null && child.signalCode === null) process.kill(child.pid, signal);
  await child.exited;
}

/** Polls `check` until true; throws naming `what` after `timeoutMs`. A bound, not a speed assertion. */
async function waitFor(what: string, check: () => Promise<boolean>, timeoutMs = 15_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`Cannot observe ${what} within ${timeoutMs} ms`);
    await Bun.sleep(20);
  }
}

interface InboxRow {
  attempts: number;
  processed: boolean;
  needs_review: boolean;
  last_error: string | null;
}

async function inboxRow(eventId: string): Promise<InboxRow> {
  const [row] = await db<InboxRow[]>`
    select attempts, processed_at is not null as processed, needs_review_at is not null as needs_review, last_error
      from webhook_inbox
     where (provider, endpoint, event_id) = ('stripe', 'billing', ${eventId})
  `;
  if (!row) throw new Error(`No inbox row for ${eventId}`);
  return row;
}

test(
  "`runWorker()` stops at 3 attempts when each of 3 worker processes is SIGKILLed inside the handler",
  async () => {
    const eventId = "evt_crash_worker_1";
    const body = eventBody(eventId, "invoice.paid", invoice({ id: "in_crash_worker_1", amount_paid: 2000, status: "paid" }));
    expect(await receiveAsync(db, { provider: "stripe", endpoint: "billing", handlers: billingHandlers }, verified(body))).toBe("queued");

    for (let attempt = 1; attempt <= 3; attempt++) {
      // From the 2nd run on, the row becomes due again only when the killed worker's 1 s lease expires.
      const worker = spawnBun(HANGING_WORKER, [fresh.url]);
      expect(await waitForLine(worker, "IN_HANDLER")).toBe(`IN_HANDLER ${attempt}`);
      await stop(worker.child, "SIGKILL");
      expect(worker.child.signalCode).toBe("SIGKILL");
      expect(await inboxRow(eventId)).toMatchObject({ attempts: attempt, processed: false, needs_review: false, last_error: null });
    }

    // A fourth worker finds the row due again, with every attempt used up: it parks it and never runs the handler.
    const fourth = spawnBun(HANGING_WORKER, [fresh.url]);
    try {
      await waitForLine(fourth, "WORKER_STARTED");
      await waitFor("the fourth worker parking the row", async () => (await inboxRow(eventId)).needs_review);
    } finally {
      await stop(fourth.child, "SIGKILL");
    }
    await fourth.stdoutDone;
    expect(fourth.lines.filter((l) => l.startsWith("IN_HANDLER"))).toEqual([]);

    expect(await claimBatch(db, { limit: 10, leaseMs: 1_000, maxAttempts: 3 })).toEqual([]);
    const row = await inboxRow(eventId);
    expect(row).toMatchObject({ attempts: 3, processed: false, needs_review: true });
    expect(row.last_error).toContain("attempt limit 3 reached");
    expect(await count(db, "ledger_entries")).toBe(0);
    expect(await count(db, "invoices")).toBe(0);
  },
  CHILDREN,
);

test(
  "an event that SIGKILLs its worker mid-batch: every row of the batch keeps its counted attempt and lease; retried alone, the others are applied once and the poison is parked at the limit",
  async () => {
    const target = { provider: "stripe", endpoint: "billing", handlers: billingHandlers };
    // Sorted by invoice id in the batch: two innocents, the poison, two more.
    const invoices = ["in_batch_a1", "in_batch_a2", "in_batch_m_poison", "in_batch_z1", "in_batch_z2"];
    for (const id of invoices) {
      const body = eventBody(`evt_${id}`, "invoice.paid", invoice({ id, amount_paid: 2000, status: "paid" }));
      expect(await receiveAsync(db, target, verified(body))).toBe("queued");
    }
    const rows = () =>
      db<{ event_id: string; attempts: number; processed: boolean; parked: boolean; leased: boolean }[]>`
        select event_id, attempts, processed_at is not null as processed, needs_review_at is not null as parked,
               available_at > now() as leased
          from webhook_inbox order by event_id
      `;

    const first = spawnBun(POISON_WORKER, [fresh.url]);
    await first.child.exited;
    await first.stdoutDone;
    expect(first.child.signalCode).toBe("SIGKILL");
    // The two innocents sorted before it ran in the same transaction as the poison, which never committed.
    expect(first.lines.filter((l) => l.startsWith("IN_HANDLER"))).toEqual([
      "IN_HANDLER in_batch_a1 1",
      "IN_HANDLER in_batch_a2 1",
      "IN_HANDLER in_batch_m_poison 1",
    ]);
    const afterKill = await rows();
    expect(afterKill.map((r) => [r.attempts, r.processed, r.parked])).toEqual(invoices.map(() => [1, false, false]));
    expect(afterKill.filter((r) => r.leased).length).toBeGreaterThan(0); // its 1 s lease, read right after the kill
    expect(await count(db, "ledger_entries")).toBe(0);

    // Workers started one after another until nothing is left to do: each row is now retried alone.
    const lines: string[] = [];
    for (let run = 0; run < 8; run++) {
      const open = await count(db, "webhook_inbox", "processed_at is null and needs_review_at is null");
      if (open === 0) break;
      await Bun.sleep(1_100); // the last kill's lease runs out
      const worker = spawnBun(POISON_WORKER, [fresh.url]);
      try {
        await Promise.race([
          worker.child.exited,
          waitFor(
            "the backlog settled",
            async () => (await count(db, "webhook_inbox", "processed_at is null and needs_review_at is null")) === 0,
          ),
        ]);
      } finally {
        await stop(worker.child, "SIGTERM");
      }
      await worker.stdoutDone;
      lines.push(...worker.lines.filter((l) => l.startsWith("IN_HANDLER")));
    }
    const end = await rows();
    expect(end.map((r) => [r.event_id, r.attempts, r.processed, r.parked])).toEqual([
      ["evt_in_batch_a1", 2, true, false],
      ["evt_in_batch_a2", 2, true, false],
      ["evt_in_batch_m_poison", 3, false, true],
      ["evt_in_batch_z1", 2, true, false],
      ["evt_in_batch_z2", 2, true, false],
    ]);
    // The poison ran 3 times in all (attempt 1 in the batch, 2 and 3 alone), never once more.
    expect(lines.filter((l) => l.includes("poison"))).toEqual(["IN_HANDLER in_batch_m_poison 2", "IN_HANDLER in_batch_m_poison 3"]);
    expect(await count(db, "ledger_entries")).toBe(4);
  },
  CHILDREN,
);

test(
  "an event that SIGKILLs its worker at 4 slots × batches of 8 takes only itself to the attempt limit: the 30 rows killed with it are retried one at a time, never beside it",
  async () => {
    const target = { provider: "stripe", endpoint: "billing", handlers: billingHandlers };
    const ids = Array.from({ length: 31 }, (_, i) => (i === 17 ? "in_slots_poison" : `in_slots_${String(i).padStart(2, "0")}`));
    for (const id of ids) {
      const body = eventBody(`evt_${id}`, "invoice.paid", invoice({ id, amount_paid: 2000, status: "paid" }));
      expect(await receiveAsync(db, target, verified(body))).toBe("queued");
    }
    const open = () => count(db, "webhook_inbox", "processed_at is null and needs_review_at is null");
    let kills = 0;
    for (let run = 0; run < 10 && (await open()) > 0; run++) {
      if (run > 0) await Bun.sleep(1_100); // the last kill's leases run out
      const worker = spawnBun(POISON_WORKER, [fresh.url, "4", "8"]);
      try {
        await Promise.race([worker.child.exited, waitFor("the backlog settled", async () => (await open()) === 0)]);
      } finally {
        await stop(worker.child, "SIGTERM");
      }
      await worker.stdoutDone;
      if (worker.child.signalCode === "SIGKILL") kills++;
    }
    expect(kills).toBe(3); // the poison's three attempts, each a crash
    const parked = await db<
      { event_id: string; attempts: number }[]
    >`select event_id, attempts from webhook_inbox where needs_review_at is not null`;
    expect([...parked]).toEqual([{ event_id: "evt_in_slots_poison", attempts: 3 }]);
    expect(await count(db, "webhook_inbox", "processed_at is not null and attempts <= 2")).toBe(30);
    expect(await count(db, "ledger_entries")).toBe(30);
  },
  CHILDREN,
);

test(
  "`runWorker()` with its only slot busy still finishes its rows after a NOTIFY arrives",
  async () => {
    const target = { provider: "stripe", endpoint: "billing", handlers: billingHandlers };
    const queue = async (n: number) => {
      const body = eventBody(`evt_busy_${n}`, "invoice.paid", invoice({ id: `in_busy_${n}`, amount_paid: 2000, status: "paid" }));
      expect(await receiveAsync(db, target, verified(body))).toBe("queued");
    };
    await queue(1);
    const worker = spawnBun(BUSY_WORKER, [fresh.url]);
    let drained = false;
    try {
      await waitForLine(worker, "IN_HANDLER evt_busy_1");
      await queue(2); // its NOTIFY reaches the worker while its one slot is taken
      await waitFor("both rows processed", async () => (await count(db, "webhook_inbox", "processed_at is null")) === 0, 10_000);
      drained = true;
    } finally {
      // A worker stuck in a loop that never yields cannot even handle SIGTERM: SIGKILL it then.
      await stop(worker.child, drained ? "SIGTERM" : "SIGKILL");
    }
    await worker.stdoutDone;
    expect(worker.child.exitCode).toBe(0);
    expect(worker.lines.filter((l) => l.startsWith("IN_HANDLER"))).toEqual(["IN_HANDLER evt_busy_1", "IN_HANDLER evt_busy_2"]);
    expect(await count(db, "ledger_entries")).toBe(2);
    expect(await count(db, "webhook_inbox", "attempts = 1 and outcome = 'processed'")).toBe(2);
  },
  CHILDREN,
);

test(
  "`bun run worker` ×2 drains the shuffled, duplicated fixture lifecycle delivered in async mode to the sync-mode end state, and exits 0 on SIGTERM",
  async () => {
    const [base] = stripeEndpoints([{ name: "billing", secrets: [SECRET] }]);
    if (!base) throw new Error("stripeEndpoints() returned no endpoint");
    const endpoint: Endpoint = { ...base, mode: "async" };
    const app = createApp({ db, endpoints: [endpoint], log: () => {} });

    const deliveries = [...lifecycle(), ...lifecycle()];
    shuffleInPlace(deliveries, mulberry32(20_251_130));
    const outcomes: Record<string, number> = {};
    for (const { body } of deliveries) {
      const response = await app.fetch(await signedRequest("http://receiver.test/webhooks/stripe", body));
      expect(response.status).toBe(200);
      const { outcome } = (await response.json()) as { outcome: string };
      outcomes[outcome] = (outcomes[outcome] ?? 0) + 1;
    }
    expect(outcomes).toEqual({ queued: 11, ignored: 1, duplicate: 12 });
    expect(await count(db, "webhook_inbox", "processed_at is null")).toBe(11);
    expect(await count(db, "ledger_entries")).toBe(0);

    const env = { ...process.env, DATABASE_URL: fresh.url };
    const workers = [spawnBun(BIN_WORKER, ["--poll-ms", "200"], env), spawnBun(BIN_WORKER, ["--poll-ms", "200"], env)];
    try {
      // SIGTERM is handled once the entry file printed "started"; before that it would just kill the process.
      for (const w of workers) await waitForLine(w, '{"worker":"started"');
      await waitFor("an empty backlog", async () => (await count(db, "webhook_inbox", "processed_at is null")) === 0, 20_000);
    } finally {
      await Promise.all(workers.map((w) => stop(w.child, "SIGTERM")));
    }
    for (const w of workers) {
      await w.stdoutDone;
      expect({ exitCode: w.child.exitCode, stderr: await w.stderr }).toEqual({ exitCode: 0, stderr: "" });
      expect(w.lines.some((l) => l.includes('"worker":"stopped"'))).toBe(true);
    }
    // Each queued row was processed exactly once, by one of the two workers (which one is up to them).
    const processedIds = workers.flatMap((w) =>
      w.lines.filter((l) => l.includes('"outcome":"processed"')).map((l) => (JSON.parse(l) as { event_id: string }).event_id),
    );
    expect(processedIds.length).toBe(11);
    expect(new Set(processedIds).size).toBe(11);

    const invoices = await db<{ id: string; status: string; amount_paid: string }[]>`
    select id, status, amount_paid::text as amount_paid
      from invoices
     order by id
  `;
    expect([...invoices]).toEqual([
      { id: "in_1SkA1pLgUG5tbmjcQ7nB2vXa", status: "paid", amount_paid: "2000" },
      { id: "in_1SkA2qLgUG5tbmjcR8oC3wYb", status: "void", amount_paid: "0" },
      { id: "in_1SkA3rLgUG5tbmjcS9pD4xZc", status: "paid", amount_paid: "129900" },
    ]);
    expect(await count(db, "ledger_entries")).toBe(2);
    expect(await count(db, "outbox")).toBe(2);
    expect(await count(db, "webhook_inbox", "processed_at is null")).toBe(0);
    expect(await count(db, "webhook_inbox", "needs_review_at is not null")).toBe(0);
    expect(await count(db, "webhook_inbox", "outcome = 'processed' and attempts = 1")).toBe(11);
    expect(await count(db, "webhook_inbox", "outcome = 'ignored' and attempts = 0")).toBe(1);
  },
  CHILDREN,
);

test(
  "a worker SIGKILLed while a row waits on a row lock leaves no backend holding locks past --timeout-ms",
  async () => {
    const tag = "row";
    const created = eventBody(
      `evt_orphan_created_${tag}`,
      "invoice.created",
      invoice({ id: `in_orphan_${tag}`, status: "draft", amount_paid: 0 }),
    );
    const target = { provider: "stripe", endpoint: "billing", handlers: billingHandlers };
    expect(await receiveSync(db, target, verified(created))).toBe("processed"); // the invoice row to lock
    for (const [type, status] of [
      ["invoice.finalized", "open"],
      ["invoice.paid", "paid"],
    ] as const) {
      const body = eventBody(
        `evt_orphan_${type}_${tag}`,
        type,
        invoice({ id: `in_orphan_${tag}`, status, amount_paid: status === "paid" ? 2000 : 0 }),
      );
      expect(await receiveAsync(db, target, verified(body))).toBe("queued");
    }
    const locker = connect(fresh.url, { max: 1 });
    let release = () => {};
    const held = new Promise<void>((resolve) => (release = resolve));
    let lockerPid: number | undefined;
    const lock = locker.begin(async (tx) => {
      const [row] = await tx<{ pid: number }[]>`select pg_backend_pid() as pid from invoices where id = ${`in_orphan_${tag}`} for update`;
      lockerPid = row?.pid;
      await held;
    });
    try {
      while (lockerPid === undefined) await Bun.sleep(10);
      const worker = spawnBun(BIN_WORKER, ["--timeout-ms", "1500", "--lease-ms", "20000", "--poll-ms", "100"], {
        ...process.env,
        DATABASE_URL: fresh.url,
      });
      const waiting = () =>
        db<
          { pid: number }[]
        >`select pid from pg_stat_activity where datname = current_database() and application_name = 'webhook-inbox worker' and wait_event_type = 'Lock'`;
      await waitFor("the worker waiting on the invoice lock", async () => (await waiting()).length > 0);
      await stop(worker.child, "SIGKILL");
      // The lock is still held: only a server-side bound can end the dead worker's waiting statement.
      await waitFor(
        "no backend of the killed worker left",
        async () =>
          (await db`select 1 from pg_stat_activity where datname = current_database() and application_name = 'webhook-inbox worker'`)
            .length === 0,
        8_000,
      );
      const [still] = await db<{ state: string }[]>`select state from pg_stat_activity where pid = ${lockerPid ?? -1}`;
      expect(still?.state).toBe("idle in transaction");
    } finally {
      release();
      await lock.catch(() => {});
      await locker.end({ timeout: 1 });
    }
  },
  CHILDREN,
);
