// Pause and hold (issue 37): while an endpoint (or one connected account) is paused its deliveries are
// verified, recorded and answered 2xx, nothing is applied, and `resume` lets the worker apply what was
// held, oldest first. Races: a delivery in flight while the pause commits (the pause waits for it), a
// pause committing while a delivery waits on its lock (the delivery sees it), a worker holding a claimed
// row when the pause commits (its re-check sees it). Also backfill's and replay's paths, the gauges,
// the operator's page and the CLI.
import { afterAll, beforeEach, describe, expect, test } from "bun:test";
import { join } from "node:path";
import parsePrometheusTextFormat from "parse-prometheus-text-format";
import { connect, type Db } from "../../src/db/db.ts";
import { billingHandlers } from "../../src/handlers/billing.ts";
import type { HandlerTable } from "../../src/handlers/handler-table.ts";
import { EndpointPaused, PAUSE_LOCK } from "../../src/inbox/pauses.ts";
import { pauseEndpoint, resumeEndpoint } from "../../src/ops/pause.ts";
import { replayEvent } from "../../src/ops/replay.ts";
import type { InboxStatus } from "../../src/ops/status.ts";
import { recordPage } from "../../src/reconcile/record-page.ts";
import { createApp, type App } from "../../src/receiver/app.ts";
import { stripeEndpoints } from "../../src/receiver/endpoints.ts";
import { receiveHybrid, receiveSync, type ReceiveTarget } from "../../src/receiver/receive.ts";
import { createAdmin } from "../../src/admin/admin.ts";
import { claimBatch } from "../../src/worker/claim.ts";
import { processClaim } from "../../src/worker/process-claim.ts";
import { processClaims } from "../../src/worker/process-batch.ts";
import { runWorker } from "../../src/worker/worker.ts";
import { count, eventBody, freshDatabase, invoice, SECRET, signedRequest, verified } from "../support/helpers.ts";
import { waitUntil } from "../support/wait-until.ts";

const fresh = await freshDatabase();
const db = fresh.db;
afterAll(() => fresh.drop());
beforeEach(async () => {
  await db`truncate webhook_inbox, webhook_inbox_payloads, endpoint_pauses, outbox, ledger_entries, invoices`;
});

const BILLING: ReceiveTarget = { provider: "stripe", endpoint: "billing", handlers: billingHandlers };
const BACKOFF = { baseMs: 60_000, capMs: 600_000 };
const PROCESS = { tables: { stripe: billingHandlers }, timeoutMs: 5_000, maxAttempts: 10, backoff: BACKOFF };
const WAITS = 60_000;
const TOKEN = "pause-test-admin-token-0123456789abcdefghij";

let seq = 0;
/** A fresh invoice.paid event (its own invoice, 2000 usd), of `account` when given. */
function paid(account?: string) {
  const n = ++seq;
  const eventId = `evt_pause_${n}`;
  const body = eventBody(eventId, "invoice.paid", invoice({ id: `in_pause_${n}`, amount_paid: 2000, status: "paid" }));
  const event = verified(body);
  return { eventId, body, event: account ? { ...event, account } : event };
}

async function row(eventId: string) {
  const [r] = await db<{ processed: boolean; outcome: string | null; attempts: number; account: string }[]>`
    select processed_at is not null as processed, outcome, attempts, account from webhook_inbox where event_id = ${eventId}
  `;
  return r!;
}

/** Runs a worker until no row is unprocessed (or `until` holds); returns the event ids in the order it applied them. */
async function drain(until?: () => Promise<boolean>): Promise<string[]> {
  const applied: string[] = [];
  const controller = new AbortController();
  const pool = connect(fresh.url, { max: 3 });
  const worker = runWorker({
    db: pool,
    tables: { stripe: billingHandlers },
    signal: controller.signal,
    concurrency: 1,
    batch: 1,
    pollMs: 20,
    log: (line) => void (line.outcome === "processed" && applied.push(String(line.event_id))),
  });
  try {
    await waitUntil("the worker done", until ?? (async () => (await count(db, "webhook_inbox", "processed_at is null")) === 0), {
      timeoutMs: 30_000,
    });
  } finally {
    controller.abort();
    await worker;
    await pool.end({ timeout: 5 });
  }
  return applied;
}

describe("pause and resume", () => {
  test("`pauseEndpoint()` holds sync deliveries (answered 200 queued, nothing booked); `resumeEndpoint()` lets the worker apply them oldest first", async () => {
    const app = createApp({ db, endpoints: stripeEndpoints([{ name: "billing", secrets: [SECRET] }]), log: () => {} });
    const paused = await pauseEndpoint(db, { endpoint: "billing" }, "ledger maintenance");
    expect(paused).toMatchObject({ endpoint: "billing", account: "", paused: true, note: "ledger maintenance" });
    expect(await pauseEndpoint(db, { endpoint: "billing" })).toMatchObject({ paused: false, note: "ledger maintenance" });

    const held: string[] = [];
    for (let i = 0; i < 5; i++) {
      const e = paid();
      held.push(e.eventId);
      const response = await app.fetch(await signedRequest("http://receiver.test/webhooks/stripe/billing", e.body));
      expect({ status: response.status, body: await response.json() }).toEqual({
        status: 200,
        body: { outcome: "queued", event_id: e.eventId },
      });
      // Stripe's retry of a held event is a duplicate, as for any recorded event.
      const again = await app.fetch(await signedRequest("http://receiver.test/webhooks/stripe/billing", e.body));
      expect(await again.json()).toEqual({ outcome: "duplicate", event_id: e.eventId });
    }
    expect(await count(db, "ledger_entries")).toBe(0);
    expect(await count(db, "webhook_inbox", "processed_at is null and attempts = 0")).toBe(5);
    // A worker running meanwhile claims none of them.
    expect(await claimBatch(db, { limit: 10, leaseMs: 60_000, maxAttempts: 10 })).toEqual([]);

    const resumed = await resumeEndpoint(db, { endpoint: "billing" });
    expect(resumed).toMatchObject({ resumed: true, pausedAt: paused.pausedAt, remaining: [] });
    expect(await drain()).toEqual(held);
    expect(await count(db, "ledger_entries")).toBe(5);
    expect(await count(db, "webhook_inbox", "outcome = 'processed' and attempts = 1")).toBe(5);
    expect(await resumeEndpoint(db, { endpoint: "billing" })).toMatchObject({ resumed: false });
  });

  test("`pauseEndpoint()` of one account holds only its events; hybrid mode records them for the worker too", async () => {
    await pauseEndpoint(db, { endpoint: "billing", account: "acct_noisy" });
    const noisy = paid("acct_noisy");
    const other = paid("acct_calm");
    const platform = paid();
    expect(await receiveSync(db, BILLING, noisy.event)).toBe("queued");
    expect(await receiveSync(db, BILLING, other.event)).toBe("processed");
    expect(await receiveSync(db, BILLING, platform.event)).toBe("processed");
    const hybrid = paid("acct_noisy");
    expect(await receiveHybrid(db, BILLING, hybrid.event, { budgetMs: 2_000, backoff: BACKOFF })).toBe("queued");
    expect(await row(hybrid.eventId)).toMatchObject({ processed: false, attempts: 0, account: "acct_noisy" });
    expect(await count(db, "ledger_entries")).toBe(2);
    await resumeEndpoint(db, { endpoint: "billing", account: "acct_noisy" });
    expect((await drain()).sort()).toEqual([noisy.eventId, hybrid.eventId].sort());
    expect(await count(db, "ledger_entries")).toBe(4);
  });

  test("types no handler applies are recorded ignored while paused, as always", async () => {
    await pauseEndpoint(db, { endpoint: "billing" });
    const e = verified(eventBody("evt_pause_plan", "plan.created", { id: "plan_1", object: "plan" }));
    expect(await receiveSync(db, BILLING, e)).toBe("ignored");
  });

  test(
    "a pause waits for a delivery being applied when it is asked for; the delivery commits processed, the next is held",
    async () => {
      let release!: () => void;
      const gate = new Promise<void>((resolve) => (release = resolve));
      let entered!: () => void;
      const inHandler = new Promise<void>((resolve) => (entered = resolve));
      const slow: HandlerTable = {
        "invoice.paid": async (tx, object, ctx) => {
          entered();
          await gate;
          await billingHandlers["invoice.paid"]!(tx, object, ctx);
        },
      };
      const [deliveryDb, pauseDb] = [connect(fresh.url, { max: 1 }), connect(fresh.url, { max: 1, applicationName: "pause-waits" })];
      try {
        const first = paid();
        const delivery = receiveSync(deliveryDb, { ...BILLING, handlers: slow }, first.event);
        await inHandler;
        let pausedAt: number | undefined;
        const pausing = pauseEndpoint(pauseDb, { endpoint: "billing" }).then((r) => ((pausedAt = Date.now()), r));
        // The pause is committed at once, then waits for the delivery that holds the endpoint's pause lock SHARED.
        await waitUntil("the pause committed", async () => (await count(db, "endpoint_pauses")) === 1);
        await Bun.sleep(300);
        expect(pausedAt).toBeUndefined();
        // Deliveries that began after it hold their events, answered at once while the pause still waits.
        expect(await receiveSync(db, BILLING, paid().event)).toBe("queued");
        expect(pausedAt).toBeUndefined();
        release();
        expect(await delivery).toBe("processed");
        expect(await pausing).toMatchObject({ paused: true, stillApplying: 0 });
        expect(await count(db, "ledger_entries")).toBe(1);
        expect(await receiveSync(db, BILLING, paid().event)).toBe("queued");
        expect(await count(db, "ledger_entries")).toBe(1);
        // Nothing of ours waits on the pause lock: the pause never takes it.
        const [waiting] = await db<{ n: number }[]>`
          select count(*)::int as n from pg_locks where locktype = 'advisory' and not granted and classid = ${PAUSE_LOCK}`;
        expect(waiting!.n).toBe(0);
      } finally {
        release();
        await Promise.all([deliveryDb.end({ timeout: 5 }), pauseDb.end({ timeout: 5 })]);
      }
    },
    WAITS,
  );

  test(
    "a pause whose wait runs out says how many applications are still running, stays in force, and a second pause waits for them again",
    async () => {
      let release!: () => void;
      const gate = new Promise<void>((resolve) => (release = resolve));
      let entered!: () => void;
      const inHandler = new Promise<void>((resolve) => (entered = resolve));
      const slow: HandlerTable = {
        "invoice.paid": async (tx, object, ctx) => {
          entered();
          await gate;
          await billingHandlers["invoice.paid"]!(tx, object, ctx);
        },
      };
      const deliveryDb = connect(fresh.url, { max: 1 });
      try {
        const delivery = receiveSync(deliveryDb, { ...BILLING, handlers: slow }, paid().event);
        await inHandler;
        expect(await pauseEndpoint(db, { endpoint: "billing" }, "maintenance", 300)).toMatchObject({ paused: true, stillApplying: 1 });
        // In force meanwhile: a delivery that begins now is held.
        expect(await receiveSync(db, BILLING, paid().event)).toBe("queued");
        const again = pauseEndpoint(db, { endpoint: "billing" }, undefined, 10_000);
        release();
        expect(await delivery).toBe("processed");
        expect(await again).toMatchObject({ paused: false, stillApplying: 0, note: "maintenance" });
        expect(await count(db, "ledger_entries")).toBe(1);
      } finally {
        release();
        await deliveryDb.end({ timeout: 5 });
      }
    },
    WAITS,
  );

  test("a worker holding a claimed row when the pause commits applies nothing: its re-check sees the pause and gives the attempt back", async () => {
    const e = paid();
    expect(await receiveSync(db, { ...BILLING, handlers: {} }, e.event)).toBe("ignored");
    // Queue it for the worker as async receive would.
    await db`update webhook_inbox set processed_at = null, outcome = null where event_id = ${e.eventId}`;
    const [claim] = await claimBatch(db, { limit: 1, leaseMs: 60_000, maxAttempts: 10 });
    expect(claim).toMatchObject({ eventId: e.eventId, attempt: 1 });
    await pauseEndpoint(db, { endpoint: "billing" });
    expect(await processClaim(db, claim!, PROCESS)).toMatchObject({ outcome: "held" });
    expect(await row(e.eventId)).toMatchObject({ processed: false, attempts: 0 });
    expect(await count(db, "ledger_entries")).toBe(0);
    await resumeEndpoint(db, { endpoint: "billing" });
    await drain();
    expect(await row(e.eventId)).toMatchObject({ processed: true, outcome: "processed", attempts: 1 });
    expect(await count(db, "ledger_entries")).toBe(1);
  });

  test("a worker's batch releases the claimed rows of an endpoint paused since the claim and applies the others", async () => {
    const a = paid();
    const b = paid();
    expect(await receiveSync(db, { ...BILLING, handlers: {} }, a.event)).toBe("ignored");
    expect(await receiveSync(db, { ...BILLING, endpoint: "ledger", handlers: {} }, b.event)).toBe("ignored");
    await db`update webhook_inbox set processed_at = null, outcome = null`; // queued, as async receive records them
    const claims = await claimBatch(db, { limit: 10, leaseMs: 60_000, maxAttempts: 10 });
    expect(claims).toHaveLength(2);
    await pauseEndpoint(db, { endpoint: "ledger" });
    const results = await processClaims(db, claims, PROCESS);
    const outcome = Object.fromEntries(claims.map((c, i) => [c.eventId, results[i]!.outcome]));
    expect(outcome).toEqual({ [a.eventId]: "processed", [b.eventId]: "held" });
    expect(await row(b.eventId)).toMatchObject({ processed: false, attempts: 0 });
  });

  test("replay refuses a paused endpoint's row; event backfill records paused events for the worker", async () => {
    const e = paid();
    expect(await receiveSync(db, BILLING, e.event)).toBe("processed");
    await pauseEndpoint(db, { endpoint: "billing" });
    const replay = replayEvent(db, { provider: "stripe", endpoint: "billing", eventId: e.eventId }, billingHandlers);
    expect(replay).rejects.toBeInstanceOf(EndpointPaused);
    await replay.catch(() => {});
    const backfilled = paid();
    const counts = await recordPage(db, BILLING, "sync", BACKOFF, [backfilled.event], async () => true, {
      name: "billing",
      handlers: billingHandlers,
    });
    expect(counts.queued).toBe(1);
    expect(await row(backfilled.eventId)).toMatchObject({ processed: false });
    expect(await count(db, "ledger_entries")).toBe(1);
  });
});

describe("what shows a pause", () => {
  test("`/metrics` reports each endpoint's pauses, the oldest one's age and the rows they hold; the operator's page shows a tile", async () => {
    const endpoints = stripeEndpoints(["billing", "payments"].map((name) => ({ name, secrets: [SECRET] })));
    const app: App = createApp({ db, endpoints, log: () => {} });
    await pauseEndpoint(db, { endpoint: "billing" }, "month-end close");
    await pauseEndpoint(db, { endpoint: "billing", account: "acct_noisy" });
    for (let i = 0; i < 3; i++) await receiveSync(db, BILLING, paid().event);
    await db`update endpoint_pauses set paused_at = now() - interval '2 hours' where account = ''`;

    const families = parsePrometheusTextFormat(await (await app.fetch(new Request("http://receiver.test/metrics"))).text());
    const gauge = (name: string) =>
      Object.fromEntries(
        (families.find((f) => f.name === name)?.metrics ?? []).map((m) => [
          (m as { labels: { endpoint: string } }).labels.endpoint,
          Number((m as { value: string }).value),
        ]),
      );
    expect(gauge("webhook_inbox_paused")).toEqual({ billing: 2, payments: 0 });
    expect(gauge("webhook_inbox_held")).toEqual({ billing: 3, payments: 0 });
    const ages = gauge("webhook_inbox_pause_age_seconds");
    expect(ages.payments).toBe(0);
    expect(ages.billing).toBeGreaterThanOrEqual(7_200);

    const admin = createAdmin({
      db,
      token: TOKEN,
      endpoints: endpoints.map((e) => ({ provider: "stripe", name: e.name, handlers: e.handlers })),
      log: () => {},
    });
    const page = await (
      await admin.fetch(new Request("http://receiver.test/admin", { headers: { authorization: `Bearer ${TOKEN}` } }))
    ).text();
    expect(page).toContain("month-end close");
    expect(page).toContain("bun run inbox resume --endpoint billing --account acct_noisy");
    expect(page.match(/class="tile warn paused"/g)).toHaveLength(2);

    // The page's replay of a paused endpoint's event is refused with why, like the command's.
    const settled = paid();
    await db`delete from endpoint_pauses`;
    expect(await receiveSync(db, BILLING, settled.event)).toBe("processed");
    await pauseEndpoint(db, { endpoint: "billing" });
    const replay = await admin.fetch(
      new Request(`http://receiver.test/admin/events/${settled.eventId}/replay`, {
        method: "POST",
        headers: { authorization: `Bearer ${TOKEN}`, "content-type": "application/x-www-form-urlencoded" },
        body: new URLSearchParams({ provider: "stripe", endpoint: "billing" }),
      }),
    );
    expect(replay.status).toBe(409);
    expect(await replay.text()).toContain("Endpoint billing is paused");
  });
});

describe("bun run inbox pause / resume", () => {
  const REPO = join(import.meta.dir, "..", "..");
  async function inbox(args: string[], env: Record<string, string> = {}) {
    const proc = Bun.spawn([process.execPath, "src/bin/inbox.ts", ...args], {
      cwd: REPO,
      env: { ...process.env, DATABASE_URL: fresh.url, ...env },
      stdout: "pipe",
      stderr: "pipe",
      timeout: 20_000,
    });
    const [stdout, stderr] = await Promise.all([new Response(proc.stdout).text(), new Response(proc.stderr).text(), proc.exited]);
    return { code: proc.exitCode, stdout, stderr };
  }

  test(
    "`inbox pause` and `resume` change the pause, `status --json` lists it, and a name nobody knows or a bad account is a usage error",
    async () => {
      const paused = await inbox(["pause", "--endpoint", "billing", "--note", "ledger maintenance", "--json"]);
      expect({ code: paused.code, stderr: paused.stderr }).toEqual({ code: 0, stderr: "" });
      expect(JSON.parse(paused.stdout)).toMatchObject({ endpoint: "billing", account: "", paused: true, note: "ledger maintenance" });
      await receiveSync(db, BILLING, paid().event);

      const status = await inbox(["status", "--json"]);
      const s = JSON.parse(status.stdout) as InboxStatus;
      expect(s.pauses).toEqual([
        expect.objectContaining({ endpoint: "billing", account: "", note: "ledger maintenance", held: 1 }) as never,
      ]);
      const text = await inbox(["status"]);
      expect(text.stdout).toContain("paused (events recorded and answered 2xx");
      expect(text.stdout).toContain("ledger maintenance");

      const unknown = await inbox(["pause", "--endpoint", "biling"]);
      expect(unknown.code).toBe(2);
      expect(unknown.stderr).toContain('No endpoint named "biling"');
      const badAccount = await inbox(["pause", "--endpoint", "billing", "--account", "cus_1"]);
      expect(badAccount.code).toBe(2);
      // An account no event of the endpoint came from (a typo) is refused, unless --force.
      const unseen = await inbox(["pause", "--endpoint", "billing", "--account", "acct_TYPO0000"]);
      expect(unseen.code).toBe(2);
      expect(unseen.stderr).toContain("No event of account acct_TYPO0000 has reached endpoint billing");
      expect(await count(db, "endpoint_pauses", "account = 'acct_TYPO0000'")).toBe(0);
      const forced = await inbox(["pause", "--endpoint", "billing", "--account", "acct_TYPO0000", "--force"]);
      expect(forced.code).toBe(0);
      expect((await inbox(["resume", "--endpoint", "billing", "--account", "acct_TYPO0000"])).code).toBe(0);
      expect((await inbox(["pause"])).code).toBe(2);

      const resumed = await inbox(["resume", "--endpoint", "billing"]);
      expect(resumed.code).toBe(0);
      expect(resumed.stdout).toContain("Resumed endpoint billing (every account)");
      expect(resumed.stdout).toContain("1 unprocessed row(s)");
      expect(await count(db, "endpoint_pauses")).toBe(0);
      const again = await inbox(["resume", "--endpoint", "billing", "--json"]);
      expect(JSON.parse(again.stdout)).toMatchObject({ resumed: false, remaining: [] });
    },
    WAITS,
  );
});
