// A primary under synchronous replication whose standby is gone (synchronous_standby_names names a standby
// that no longer runs): every commit waits, and PostgreSQL applies no statement_timeout to that wait. The
// real `serve` (a sync, an async and a hybrid endpoint), `worker` and `dispatch` must still answer and stop
// in bounded time, never acknowledge what the standby has not confirmed, and never cancel a COMMIT (a
// cancelled wait keeps the commit on the primary only, with a WARNING and no error): the primary's log holds
// no such warning but the one this test causes itself, to show that one is answered 503, not 2xx. When the
// standby is back, the senders' retries record every event once.
import { afterAll, expect, test } from "bun:test";
import type { Subprocess } from "bun";
import { readFileSync } from "node:fs";
import { connect, STUCK_SLACK_MS, type Db } from "../../src/db/db.ts";
import { migrate } from "../../src/db/migrate.ts";
import { findBinaries, startReplicatedPair, type ReplicatedPair } from "../../src/dev/replicated-postgres.ts";
import { freePort } from "../../src/runtime/embedded-postgres.ts";
import { loadMigrations } from "../../src/runtime/migrations-fs.ts";
import { spawnBun, type Running } from "../support/bun-child.ts";
import { acknowledged, BIN, childEnv, deliver, sinkReport, startServe, startSink, stopChildren, type Answer } from "../support/failover.ts";
import { eventBody, invoice, SECRET } from "../support/helpers.ts";
import { waitUntil } from "../support/wait-until.ts";

const binaries = await findBinaries();
const named = "sync standby gone test: no PostgreSQL binaries (initdb, pg_ctl, postgres) found";
const required = (process.env.CI && !["false", "0"].includes(process.env.CI)) || process.env.REQUIRE_FAILOVER_POSTGRES === "1";
if (!binaries && required) throw new Error(`${named}, and CI or REQUIRE_FAILOVER_POSTGRES=1 is set`);
if (!binaries) console.log(`skip: ${named}`);
const maybe = binaries ? test : test.skip;

const children = new Set<Subprocess>();
const cleanups: (() => unknown)[] = [];
afterAll(async () => {
  for (const child of children) if (child.exitCode === null && child.signalCode === null) process.kill(child.pid, "SIGKILL");
  for (const c of cleanups.reverse()) await c();
}, 60_000);

/** The bound of a delivery's transaction (STATEMENT_TIMEOUT_MS) and of the hybrid attempt, and the slot queue's. */
const BOUND_MS = 2_000;
const QUEUE_MS = 2_000;
const POOL = 3;
const paid = (id: string) => eventBody(`evt_sg_${id}`, "invoice.paid", invoice({ id: `in_sg_${id}`, status: "paid", amount_paid: 2000 }));
const SYNC_REP_CANCEL = "canceling wait for synchronous replication";

maybe(
  "with the synchronous standby gone, serve answers every delivery 5xx within its bound and never 2xx, worker and dispatch give up and stop, nothing cancels a COMMIT, and a cancelled wait is answered 503; with the standby back every event is recorded once",
  async () => {
    const pair: ReplicatedPair = await startReplicatedPair(binaries!, { synchronous: true, logWarnings: true });
    cleanups.push(() => pair.destroy());
    const admin: Db = connect(pair.urlOf(pair.primaryPort), { max: 2 });
    cleanups.push(() => admin.end({ timeout: 1 }));
    await migrate(admin, loadMigrations());
    const port = await freePort();
    const base = `http://127.0.0.1:${port}/webhooks/stripe`;
    const urls = { sync: `${base}/billing`, async: `${base}/queued`, hybrid: `${base}/mixed` };
    const env = childEnv(
      {
        DATABASE_URL: pair.urlOf(pair.primaryPort),
        PORT: String(port),
        STRIPE_WEBHOOK_SECRET: SECRET,
        STRIPE_ENDPOINTS: "queued,mixed",
        STRIPE_WEBHOOK_SECRET_QUEUED: SECRET,
        STRIPE_WEBHOOK_SECRET_MIXED: SECRET,
        INBOX_MODE: "sync",
        INBOX_MODE_QUEUED: "async",
        INBOX_MODE_MIXED: "hybrid",
        STATEMENT_TIMEOUT_MS: String(BOUND_MS),
        HYBRID_BUDGET_MS: String(BOUND_MS),
        QUEUE_TIMEOUT_MS: String(QUEUE_MS),
        DB_POOL_MAX: String(POOL),
        FAILOVER_CHECK_MS: "0",
        WORKER_POLL_MS: "200",
        WORKER_LEASE_MS: "4000",
        WORKER_TIMEOUT_MS: "1000",
        OUTBOX_POLL_MS: "200",
        OUTBOX_LEASE_MS: "4000",
        OUTBOX_TIMEOUT_MS: "1000",
      },
      110_000,
    );
    const sink = startSink();
    cleanups.push(() => sink.stop());
    const dispatchEnv = { ...env, OUTBOX_SINK_URL: sink.url, OUTBOX_SINK_SECRET: `whsec_${btoa("standby-gone-test-sink-key-01234")}` };
    const failed = new Map<string, { url: string; body: string }>(); // by event id: what Stripe would retry
    const send = async (url: string, id: string) => {
      const answer = await deliver(url, paid(id), SECRET);
      if (!acknowledged(answer)) failed.set(id, { url, body: paid(id) });
      return answer;
    };

    // Standby up: one payment booked in the request (its outbox message waits for a dispatcher) and one
    // queued for a worker; neither runs yet.
    let serve: Running = await startServe(env, children);
    expect((await send(urls.sync, "before_sync")).outcome).toBe("processed");
    expect((await send(urls.async, "before_async")).outcome).toBe("queued");

    await pair.stopStandby();

    // 1. A commit's wait cancelled by someone else (an operator's pg_cancel_backend, a pooler's query timeout)
    // returns success with a WARNING; the delivery is answered 503 all the same, though the row is now on the primary.
    const cancelled = send(urls.sync, "cancelled");
    let waiting: number[] = [];
    await waitUntil("the delivery's COMMIT waiting for the standby", async () => {
      waiting = (
        await admin<{ pid: number }[]>`
        select pid from pg_stat_activity where application_name = 'webhook-inbox serve' and wait_event = 'SyncRep'`
      ).map((r) => r.pid);
      return waiting.length === 1;
    });
    await admin`select pg_cancel_backend(${waiting[0]!})`;
    const cancelledAnswer = await cancelled;
    expect(`${cancelledAnswer.status} ${cancelledAnswer.outcome}`).toBe("503 database_unavailable");
    expect((await admin`select 1 from webhook_inbox where event_id = 'evt_sg_cancelled'`).length).toBe(1);
    // Its retry finds the row, but is not answered `duplicate` before the standby has it.
    const retried = await send(urls.sync, "cancelled");
    expect(`${retried.status} ${retried.outcome}`).toBe("503 database_unavailable");

    // 2. Every endpoint, more deliveries than connections: each answered 5xx within its waits for a slot and its
    // bound, never 2xx; at most DB_POOL_MAX connections wait.
    const flood: { mode: keyof typeof urls; answer: Answer }[] = await Promise.all(
      (["sync", "hybrid", "async"] as const).flatMap((mode) =>
        Array.from({ length: 4 }, async (_, i) => ({ mode, answer: await send(urls[mode], `${mode}_${i}`) })),
      ),
    );
    // An async delivery may wait for the group before its own to be sent, then for a slot (each at most
    // QUEUE_TIMEOUT_MS), then for the group's insert (its bound plus STUCK_SLACK_MS).
    const limit = { sync: QUEUE_MS + BOUND_MS, hybrid: QUEUE_MS + BOUND_MS, async: 2 * QUEUE_MS + BOUND_MS + STUCK_SLACK_MS };
    const late = flood.filter(({ mode, answer }) => answer.at - answer.sentAt > limit[mode] + 3_000);
    expect(late.map(({ mode, answer }) => `${mode} ${answer.eventId} after ${answer.at - answer.sentAt} ms`)).toEqual([]);
    expect(flood.filter(({ answer }) => answer.status !== 503).map(({ answer }) => `${answer.eventId} ${answer.status}`)).toEqual([]);
    const slowest = (mode: string) => Math.max(...flood.filter((f) => f.mode === mode).map(({ answer }) => answer.at - answer.sentAt));
    console.log(
      `standby gone: ${flood.length} deliveries all answered 503; slowest answer sync ${slowest("sync")} ms, hybrid ${slowest("hybrid")} ms, ` +
        `async ${slowest("async")} ms (bound ${BOUND_MS} ms, slot queue ${QUEUE_MS} ms, pool ${POOL})`,
    );
    const [conns] = await admin<
      { n: number }[]
    >`select count(*)::int as n from pg_stat_activity where application_name = 'webhook-inbox serve'`;
    expect(conns!.n).toBeLessThanOrEqual(POOL + 1); // the pool and /readyz's own connection

    // 3. worker and dispatch started now: their claims' commits wait; each gives up, logs it and goes on,
    // and stops on SIGTERM.
    const worker = spawnBun([BIN.worker], env, children);
    const dispatch = spawnBun([BIN.dispatch], dispatchEnv, children);
    for (const [name, c] of [
      ["worker", worker],
      ["dispatch", dispatch],
    ] as const)
      await waitUntil(`${name} giving up on a commit that waits`, async () => c.lines.some((l) => l.includes("had no answer")), {
        timeoutMs: 30_000,
      });
    const stopped = await stopChildren({ serve, worker, dispatch }, 20_000);
    expect(stopped.serve).toBe(0);
    expect(typeof stopped.worker).toBe("number");
    expect(typeof stopped.dispatch).toBe("number");

    // Nothing of ours cancelled a COMMIT: the one cancelled wait the primary logged is the test's own.
    const cancels = readFileSync(pair.primaryLog, "utf8")
      .split("\n")
      .filter((l) => l.includes(SYNC_REP_CANCEL));
    expect(cancels.length).toBe(1);

    // 4. The standby back: the waiting commits complete; Stripe's retries record every event once.
    await pair.startStandby();
    await waitUntil(
      "no commit waiting for the standby",
      async () => (await admin`select 1 from pg_stat_activity where wait_event = 'SyncRep'`).length === 0,
      { timeoutMs: 30_000 },
    );
    serve = await startServe(env, children);
    const again = spawnBun([BIN.worker], env, children);
    const dispatchAgain = spawnBun([BIN.dispatch], dispatchEnv, children);
    for (const f of failed.values()) {
      let answer = await deliver(f.url, f.body, SECRET);
      for (let tries = 1; !acknowledged(answer) && tries < 20; tries++)
        answer = await Bun.sleep(250).then(() => deliver(f.url, f.body, SECRET));
      expect(`${answer.eventId} ${answer.status}`).toBe(`${answer.eventId} 200`);
    }
    const events = 2 + 1 + flood.length;
    await waitUntil(
      "every event recorded and applied",
      async () =>
        (await admin<{ n: number }[]>`select count(distinct invoice_id)::int as n from ledger_entries where kind = 'payment'`)[0]!.n ===
        events,
      { timeoutMs: 30_000 },
    );
    const [inbox] = await admin<{ rows: number; keys: number; open: number }[]>`
      select count(*)::int as rows, count(distinct (endpoint, event_id))::int as keys,
             count(*) filter (where processed_at is null)::int as open
        from webhook_inbox`;
    expect(inbox).toEqual({ rows: events, keys: events, open: 0 });
    expect((await admin<{ n: number }[]>`select count(*)::int as n from ledger_entries where kind = 'payment'`)[0]!.n).toBe(events);
    await waitUntil(
      "every outbox message published",
      async () => (await admin`select 1 from outbox where published_at is null`).length === 0,
      { timeoutMs: 30_000 },
    );
    const report = await sinkReport(admin, sink.ids);
    expect({ messages: report.messages, missing: report.missing, unknown: report.unknown }).toEqual({
      messages: events,
      missing: [],
      unknown: [],
    });
    await stopChildren({ serve, worker: again, dispatch: dispatchAgain }, 20_000);
  },
  120_000,
);
