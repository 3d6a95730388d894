// A receiver killed (SIGKILL) while its delivery waits on a row lock commits nothing afterwards, and
// PostgreSQL ends the waiting statement at the delivery's bound by itself (review of bf4a976, R12): the
// bounds are the server's (SET LOCAL inside the transaction), and a delivery is a transaction whose
// COMMIT a dead process never sends.
import { afterAll, beforeEach, expect, test } from "bun:test";
import type { Subprocess } from "bun";
import { join } from "node:path";
import { connect } from "../../src/db/db.ts";
import { signStripePayload } from "../../src/providers/stripe.ts";
import { freePort } from "../../src/runtime/embedded-postgres.ts";
import { spawnBun, waitForLine } from "../support/bun-child.ts";
import { count, eventBody, freshDatabase, invoice, SECRET } from "../support/helpers.ts";
import { waitUntil } from "../support/wait-until.ts";

const fresh = await freshDatabase();
const db = fresh.db;
const children = new Set<Subprocess>();
afterAll(async () => {
  for (const child of children) if (child.exitCode === null && child.signalCode === null) process.kill(child.pid, "SIGKILL");
  await fresh.drop();
});
beforeEach(async () => {
  await db`truncate webhook_inbox, outbox, ledger_entries, invoices`;
});

const BIN_SERVE = join(import.meta.dir, "children", "bin-serve.ts");

/** The receiver's backends (`application_name` of `bun run serve`) waiting on a lock now. */
const waiters = () =>
  db<
    { pid: number }[]
  >`select pid from pg_stat_activity where datname = current_database() and application_name = 'webhook-inbox serve' and wait_event_type = 'Lock'`;

/**
 * Starts the real `serve` with `STATEMENT_TIMEOUT_MS`, locks the invoice, posts a payment for it, waits
 * until the delivery waits on the lock, and SIGKILLs the receiver by its pid. Returns the lock's release
 * and the waiting backend's pid.
 */
async function killWhileWaiting(invoiceId: string, statementTimeoutMs: number) {
  await db`insert into invoices (id, customer_id, status, currency, amount_due) values (${invoiceId}, 'cus_test_1', 'open', 'usd', 2000)`;
  const port = await freePort();
  const serve = spawnBun(
    [BIN_SERVE],
    {
      ...process.env,
      DATABASE_URL: fresh.url,
      STRIPE_WEBHOOK_SECRET: SECRET,
      PORT: String(port),
      STATEMENT_TIMEOUT_MS: String(statementTimeoutMs),
    },
    children,
  );
  await waitForLine(serve, "webhook-inbox listening on");
  const locker = connect(fresh.url, { max: 1 });
  let release = () => {};
  const held = new Promise<void>((resolve) => (release = resolve));
  let locked = () => {};
  const isLocked = new Promise<void>((resolve) => (locked = resolve));
  const lock = locker.begin(async (tx) => {
    await tx`select 1 from invoices where id = ${invoiceId} for update`;
    locked();
    await held;
  });
  await isLocked;
  const body = eventBody(`evt_killed_${invoiceId}`, "invoice.paid", invoice({ id: invoiceId, status: "paid", amount_paid: 2000 }));
  const signature = await signStripePayload(body, SECRET, Math.floor(Date.now() / 1000));
  const answer = fetch(`http://127.0.0.1:${port}/webhooks/stripe`, {
    method: "POST",
    headers: { "content-type": "application/json", "stripe-signature": signature },
    body,
  }).then(
    (res) => res.status,
    () => "no answer",
  );
  await waitUntil("the delivery waiting on the invoice row lock", async () => (await waiters()).length === 1);
  const [waiter] = await waiters();
  process.kill(serve.child.pid, "SIGKILL");
  await serve.child.exited;
  expect(await answer).toBe("no answer");
  return {
    pid: waiter!.pid,
    async release() {
      release();
      await lock;
      await locker.end({ timeout: 1 });
    },
  };
}

test("a receiver SIGKILLed while its delivery waits on a row lock commits nothing when the lock is released (review R12)", async () => {
  const killed = await killWhileWaiting("in_killed_released", 10_000);
  await killed.release(); // well before the bound: the waiting statement now runs to its end
  await waitUntil(
    "the killed receiver's backend gone",
    async () => (await db`select 1 from pg_stat_activity where pid = ${killed.pid}`).length === 0,
    { timeoutMs: 10_000 },
  );
  expect(await count(db, "webhook_inbox")).toBe(0);
  expect(await count(db, "ledger_entries")).toBe(0);
  expect(await db`select status from invoices`).toEqual([{ status: "open" }] as never);
}, 40_000);

test("a receiver SIGKILLed while its delivery waits on a row lock leaves no statement running past STATEMENT_TIMEOUT_MS, with the lock still held (review R12)", async () => {
  const killed = await killWhileWaiting("in_killed_held", 1_500);
  try {
    // The lock is still held: only a bound set on the server ends the dead receiver's waiting statement.
    await waitUntil(
      "the killed receiver's backend gone",
      async () => (await db`select 1 from pg_stat_activity where pid = ${killed.pid}`).length === 0,
      { timeoutMs: 8_000 },
    );
  } finally {
    await killed.release();
  }
  expect(await count(db, "webhook_inbox")).toBe(0);
  expect(await count(db, "ledger_entries")).toBe(0);
}, 40_000);
