// Provider write-backs against real PostgreSQL and a fake Stripe server reached through stripe-node
// (seed §8): the deterministic key, the record that outlives Stripe's key store, a real SIGKILL between
// the call and the record, concurrent callers, and a write-back from an outbox handler. Only processes
// this file spawned are signalled, by pid.
import { afterAll, afterEach, beforeEach, describe, expect, test } from "bun:test";
import { join } from "node:path";
import type { Subprocess } from "bun";
import type Stripe from "stripe";
import { connect, type Db } from "../../src/db/db.ts";
import { PermanentError } from "../../src/handlers/handler-table.ts";
import { runDispatcher } from "../../src/outbox/dispatcher.ts";
import { handlerSink } from "../../src/outbox/handler-sink.ts";
import { writeBackKey, writeBackOnce, WriteBackInDoubtError, type WriteBackSpec } from "../../src/writeback/write-back-once.ts";
import { closeAll, connections, count, freshDatabase } from "../support/helpers.ts";
import { waitUntil } from "../support/wait-until.ts";
import { startFakeStripe, type FakeStripe } from "./fake-stripe.ts";
import { markInvoiceBooked, stripeClient, updateCustomerMetadata } from "./stripe-calls.ts";

const CRASH_CHILD = join(import.meta.dir, "crash-after-call.ts");
/** Per-test limit for tests that start a Bun process or wait on other actors. */
const WAITS = 30_000;

const fresh = await freshDatabase();
const db = fresh.db;
const children = new Set<Subprocess>();
let fake: FakeStripe;
let stripe: Stripe;

afterAll(async () => {
  for (const child of children) process.kill(child.pid, "SIGKILL");
  await Promise.all([...children].map((c) => c.exited));
  await fresh.drop();
});
beforeEach(async () => {
  await db`truncate provider_writebacks, outbox`;
  fake = startFakeStripe();
  stripe = stripeClient(fake.port);
  fake.seed("cus_writeback_1");
});
afterEach(() => fake.stop());

const EVENT = "evt_1SkA1pLgUG5tbmjcWriteBack";
const SPEC: WriteBackSpec = { provider: "stripe", eventId: EVENT, operation: "update-customer-metadata" };
const KEY = `webhook:${EVENT}:update-customer-metadata`;

interface RecordRow {
  result_id: string | null;
  result: Record<string, unknown> | null;
  completed: boolean;
}

async function record(key = KEY): Promise<RecordRow | undefined> {
  const [row] = await db<RecordRow[]>`
    select result_id, result, completed_at is not null as completed
      from provider_writebacks
     where (provider, idempotency_key) = ('stripe', ${key})
  `;
  return row;
}

const updateCustomer = (key: string) => updateCustomerMetadata(stripe, "cus_writeback_1", EVENT, key);

describe("writeBackKey()", () => {
  test("`writeBackKey()` derives webhook:<event_id>:<operation>, the same every time", () => {
    expect(writeBackKey(EVENT, "update-customer-metadata")).toBe(KEY);
    expect(writeBackKey(EVENT, "update-customer-metadata")).toBe(writeBackKey(EVENT, "update-customer-metadata"));
  });

  test("`writeBackKey()` refuses personal data, free text, and keys over 255 characters", () => {
    expect(() => writeBackKey("jane.doe@example.com", "update-customer-metadata")).toThrow(PermanentError);
    expect(() => writeBackKey(EVENT, "email jane.doe@example.com")).toThrow(/not a lowercase kebab-case constant/);
    expect(() => writeBackKey("", "x")).toThrow(/event id is empty/);
    const fits = "evt_" + "a".repeat(255 - "webhook:".length - "evt_".length - ":op".length);
    expect(writeBackKey(fits, "op")).toHaveLength(255);
    expect(() => writeBackKey(`${fits}b`, "op")).toThrow("Cannot derive a write-back key: 256 characters, the limit is 255");
  });
});

describe("writeBackOnce()", () => {
  test("`writeBackOnce()` calls Stripe with the derived Idempotency-Key and records the object id before returning", async () => {
    const done = await writeBackOnce(db, SPEC, updateCustomer);
    expect(done).toEqual({ key: KEY, resultId: "cus_writeback_1", details: { object: "customer" }, called: true });
    expect(fake.requests).toEqual([
      { method: "POST", path: "/v1/customers/cus_writeback_1", idempotencyKey: KEY, replayed: false, status: 200 },
    ]);
    expect(fake.object("cus_writeback_1")).toMatchObject({ metadata: { last_event: EVENT }, updates: 1 });
    expect(await record()).toEqual({ result_id: "cus_writeback_1", result: { object: "customer" }, completed: true });
  });

  test("`writeBackOnce()` retried after Stripe forgot the idempotency key finds the record and does not call again", async () => {
    await writeBackOnce(db, SPEC, updateCustomer);
    fake.forgetKeys(); // days later: Stripe may drop keys after 24 h, webhooks are retried for 3 days
    const retry = await writeBackOnce(db, SPEC, updateCustomer);
    expect(retry).toEqual({ key: KEY, resultId: "cus_writeback_1", details: { object: "customer" }, called: false });
    expect(fake.requests.length).toBe(1);
    expect(fake.effects()).toBe(1);

    // Why the record is needed: the same key alone, after the fake forgot it, performs the effect again.
    await updateCustomer(KEY);
    expect(fake.requests.map((r) => [r.idempotencyKey, r.replayed])).toEqual([
      [KEY, false],
      [KEY, false],
    ]);
    expect(fake.effects()).toBe(2);
  });

  test(
    "`writeBackOnce()` after a SIGKILL between the Stripe call and the record calls again with the same key; Stripe replays it and the result is recorded",
    async () => {
      const child = Bun.spawn([process.execPath, CRASH_CHILD, fresh.url, String(fake.port), EVENT, "cus_writeback_1"], {
        stdin: "ignore",
        stdout: "pipe",
        stderr: "pipe",
      });
      children.add(child);
      const stdout = readLines(child.stdout);
      const called = await waitForLine(stdout, "CALLED ", child);
      expect(called).toBe(`CALLED cus_writeback_1 ${KEY}`);
      process.kill(child.pid, "SIGKILL");
      await child.exited;
      children.delete(child);
      expect(child.signalCode).toBe("SIGKILL");
      expect(stdout.lines).not.toContain("RECORDED");

      // The effect happened, the record did not: a started row with no result.
      expect(fake.effects()).toBe(1);
      expect(await record()).toEqual({ result_id: null, result: null, completed: false });

      const retry = await writeBackOnce(db, SPEC, updateCustomer);
      expect(retry).toEqual({ key: KEY, resultId: "cus_writeback_1", details: { object: "customer" }, called: true });
      expect(fake.requests.map((r) => [r.idempotencyKey, r.replayed])).toEqual([
        [KEY, false],
        [KEY, true],
      ]);
      expect(fake.effects()).toBe(1);
      expect(await record()).toEqual({ result_id: "cus_writeback_1", result: { object: "customer" }, completed: true });
    },
    WAITS,
  );

  test("`writeBackOnce()` refuses a started write-back older than Stripe's key lifetime instead of risking a second effect", async () => {
    await db`
      insert into provider_writebacks (provider, idempotency_key, operation, event_id, created_at)
      values ('stripe', ${KEY}, 'update-customer-metadata', ${EVENT}, now() - interval '25 hours')
    `;
    const attempt = writeBackOnce(db, SPEC, updateCustomer);
    await expect(attempt).rejects.toBeInstanceOf(WriteBackInDoubtError);
    await expect(attempt).rejects.toThrow(`Cannot repeat write-back ${KEY}: started 25 h ago without a recorded result`);
    expect(fake.requests).toEqual([]);
    expect(await record()).toEqual({ result_id: null, result: null, completed: false });
  });

  test("`writeBackOnce()` records nothing when the call fails, and its retry sends the same key (Stripe replays the stored error)", async () => {
    const spec = { ...SPEC, operation: "update-missing-customer" };
    const key = writeBackKey(EVENT, spec.operation);
    const call = (k: string) => updateCustomerMetadata(stripe, "cus_missing", EVENT, k);
    await expect(writeBackOnce(db, spec, call)).rejects.toThrow("No such customer: 'cus_missing'");
    expect(await record(key)).toEqual({ result_id: null, result: null, completed: false });
    fake.seed("cus_missing"); // too late for this key: Stripe answers it with the first result
    await expect(writeBackOnce(db, spec, call)).rejects.toThrow("No such customer: 'cus_missing'");
    expect(fake.requests.map((r) => [r.idempotencyKey, r.status, r.replayed])).toEqual([
      [key, 404, false],
      [key, 404, true],
    ]);
    expect(fake.effects()).toBe(0);
  });

  test(
    "`writeBackOnce()` ×4 concurrent callers for one key: one effect, one record, every success returns it",
    async () => {
      await fake.stop();
      fake = startFakeStripe({ delayMs: 200 }); // each call stays in flight long enough for the others to overlap
      stripe = stripeClient(fake.port);
      fake.seed("cus_writeback_1");
      const actors = connections(fresh.url, 4);
      try {
        const results = await Promise.allSettled(actors.map((actor) => writeBackOnce(actor, SPEC, updateCustomer)));
        const ok = results.filter((r) => r.status === "fulfilled").map((r) => r.value);
        const failed = results.filter((r) => r.status === "rejected").map((r) => String(r.reason));
        expect(ok.length).toBeGreaterThanOrEqual(1);
        for (const value of ok) expect(value).toMatchObject({ key: KEY, resultId: "cus_writeback_1" });
        for (const reason of failed) expect(reason).toContain("another in-progress request");
        expect(fake.effects()).toBe(1);
        expect(fake.requests.length).toBeGreaterThanOrEqual(2); // callers did overlap: Stripe saw the duplicate
        expect(new Set(fake.requests.map((r) => r.idempotencyKey))).toEqual(new Set([KEY]));
        expect(await count(db, "provider_writebacks")).toBe(1);
        expect(await record()).toMatchObject({ result_id: "cus_writeback_1", completed: true });
        // A caller that got Stripe's 409 retries later: the record answers, Stripe is not called.
        const before = fake.requests.length;
        expect(await writeBackOnce(db, SPEC, updateCustomer)).toMatchObject({ called: false, resultId: "cus_writeback_1" });
        expect(fake.requests.length).toBe(before);
      } finally {
        await closeAll(actors);
      }
    },
    WAITS,
  );

  test(
    "`writeBackOnce()` from an outbox handler: a delivery retried after a later step failed does not call Stripe again",
    async () => {
      fake.seed("in_writeback_1");
      await db`
      insert into outbox (aggregate_type, aggregate_id, event_type, payload)
      values ('Invoice', 'in_writeback_1', 'InvoicePaymentBooked', ${db.json({ invoice_id: "in_writeback_1", amount: 2000, currency: "usd", event_id: EVENT })})
    `;
      let receipts = 0;
      const handlers = {
        InvoicePaymentBooked: async (message: { payload: Record<string, unknown> }) => {
          const { invoice_id, event_id } = message.payload as { invoice_id: string; event_id: string };
          await writeBackOnce(db, { provider: "stripe", eventId: event_id, operation: "mark-invoice-booked" }, (key) =>
            markInvoiceBooked(stripe, invoice_id, key),
          );
          if (++receipts === 1) throw new Error("Mail server refuses connections"); // the next step fails once
        },
      };
      const controller = new AbortController();
      const pool: Db = connect(fresh.url, { max: 2 });
      const lines: Record<string, unknown>[] = [];
      const dispatcher = runDispatcher({
        db: pool,
        send: handlerSink(handlers),
        signal: controller.signal,
        pollMs: 20,
        backoff: { baseMs: 20, capMs: 40 },
        log: (l) => lines.push(l),
      });
      try {
        await waitUntil("the outbox row published", async () => (await count(db, "outbox", "published_at is not null")) === 1);
      } finally {
        controller.abort();
        await dispatcher;
        await pool.end({ timeout: 5 });
      }
      expect(lines.map((l) => l.outcome)).toEqual(["failed", "published"]);
      expect(fake.requests.map((r) => r.idempotencyKey)).toEqual([`webhook:${EVENT}:mark-invoice-booked`]);
      expect(fake.object("in_writeback_1")).toMatchObject({ metadata: { ledger_booked: "true" }, updates: 1 });
    },
    WAITS,
  );
});

/** Collects a child's stdout as complete lines. */
function readLines(stream: ReadableStream<Uint8Array>): { lines: string[]; done: Promise<void> } {
  const out = { lines: [] as string[], done: Promise.resolve() };
  out.done = (async () => {
    const decoder = new TextDecoder();
    let partial = "";
    for await (const chunk of stream) {
      const parts = (partial + decoder.decode(chunk, { stream: true })).split("\n");
      partial = parts.pop() ?? "";
      out.lines.push(...parts);
    }
  })();
  return out;
}

/** Waits for a stdout line starting with `prefix`; fails if the child exits first, or after 15 s. */
async function waitForLine(out: { lines: string[] }, prefix: string, child: Subprocess<"ignore", "pipe", "pipe">): Promise<string> {
  const deadline = Date.now() + 15_000;
  for (;;) {
    const line = out.lines.find((l) => l.startsWith(prefix));
    if (line !== undefined) return line;
    if (child.exitCode !== null || Date.now() > deadline) {
      throw new Error(
        `Cannot find "${prefix}" on the child's stdout (exit ${child.exitCode}): ${JSON.stringify(out.lines)}; stderr ${await new Response(child.stderr).text()}`,
      );
    }
    await Bun.sleep(10);
  }
}
