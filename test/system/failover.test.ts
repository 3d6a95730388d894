// A database failover under load (issue 24 §1): a primary and its streaming standby (src/dev/
// replicated-postgres.ts), DATABASE_URL listing both with target_session_attrs=primary, a real `serve`
// (and `worker` for async and hybrid) taking signed Stripe events and a real `dispatch` sending the outbox to
// a sink in this file; the primary's postmaster is SIGKILLed and the standby promoted, in sync, async and
// hybrid mode under synchronous and under asynchronous replication. Synchronous replication loses no
// acknowledged event. Asynchronous replication with the standby cut off from the primary's WAL (a partition)
// loses the last acknowledged commits; the product notices the new primary (src/reconcile/primary-change.ts)
// and backfills them from the fake Stripe API, so every event ends recorded and applied once, and every outbox
// message re-created by that recovery reaches the sink under the id it had before (a duplicate, never a new
// message). Prints the time to recover, the 503s, the lost-then-recovered count and the sink's duplicates.
import { afterAll, expect, test } from "bun:test";
import type { Subprocess } from "bun";
import { connect, type Db } from "../../src/db/db.ts";
import { migrate } from "../../src/db/migrate.ts";
import { startFakeStripe, type RunningFakeStripe } from "../../src/dev/fake-stripe/serve.ts";
import { FakeStripeStore, type StoredObject } from "../../src/dev/fake-stripe/store.ts";
import { freePort } from "../../src/runtime/embedded-postgres.ts";
import { loadMigrations } from "../../src/runtime/migrations-fs.ts";
import { spawnBun, waitForLine } from "../support/bun-child.ts";
import { eventBody, invoice, SECRET } from "../support/helpers.ts";
import { findBinaries, startReplicatedPair, type ReplicatedPair } from "../../src/dev/replicated-postgres.ts";
import { waitUntil } from "../support/wait-until.ts";
import { acknowledged, BIN, deliver, lostAcknowledged, recovery, sinkReport, startSink, type Answer } from "../support/failover.ts";

const API_KEY = "sk_test_failoverfailover1";
const SINK_SECRET = `whsec_${btoa("failover-test-sink-key-0123456789")}`;
const binaries = await findBinaries();
const children = new Set<Subprocess>();
const cleanups: (() => void | Promise<void>)[] = [];
afterAll(async () => {
  for (const child of children) if (child.exitCode === null && child.signalCode === null) process.kill(child.pid, "SIGKILL");
  for (const c of cleanups.reverse()) await c();
}, 120_000); // six primary/standby pairs to stop: past bun's 5 s hook default on a busy machine

/** Posts signed `invoice.paid` events with `senders` concurrent senders until `stop()`; each event is first listed by the fake Stripe API. */
function startLoad(port: number, store: FakeStripeStore, label: string, senders = 3) {
  const answers: Answer[] = [];
  let n = 0;
  let stopped = false;
  const one = async () => {
    while (!stopped && n < 3_000) {
      const i = ++n;
      const id = `in_fo_${label}_${i}`;
      const event = JSON.parse(
        eventBody(`evt_fo_${label}_${i}`, "invoice.paid", invoice({ id, status: "paid", amount_paid: 2000 })),
      ) as StoredObject;
      event.created = Math.floor(Date.now() / 1000);
      store.putEvent(event, true); // Stripe creates the event before it delivers it
      const answer = await deliver(`http://127.0.0.1:${port}/webhooks/stripe`, JSON.stringify(event), SECRET, 4_000);
      answers.push(answer);
      if (!acknowledged(answer)) await Bun.sleep(20);
    }
  };
  const running = Promise.all(Array.from({ length: senders }, one));
  return {
    answers,
    async stop() {
      stopped = true;
      await running;
    },
  };
}

async function scenario(mode: "sync" | "async" | "hybrid", synchronous: boolean) {
  const pair: ReplicatedPair = await startReplicatedPair(binaries!, { synchronous });
  cleanups.push(() => pair.destroy());
  const setup = connect(pair.url, { max: 1 });
  await migrate(setup, loadMigrations());
  await setup.end({ timeout: 1 });
  const fake: RunningFakeStripe = startFakeStripe({ store: new FakeStripeStore(API_KEY) });
  cleanups.push(() => fake.stop());
  const port = await freePort();
  const env = {
    ...process.env,
    DATABASE_URL: pair.url,
    STRIPE_WEBHOOK_SECRET: SECRET,
    PORT: String(port),
    INBOX_MODE: mode,
    STRIPE_API_KEY: API_KEY,
    STRIPE_API_BASE: fake.url,
    RECONCILE_IDLE_AFTER: "1h",
    FAILOVER_CHECK_MS: "250",
    FAILOVER_BACKFILL_MARGIN: "10m",
    WORKER_POLL_MS: "200",
    // A row the worker claimed on the old primary stays leased on the new one until its lease ends.
    WORKER_LEASE_MS: "4000",
    WORKER_TIMEOUT_MS: "2000",
    LOG_LEVEL: "warn",
    // Each child outlives a scenario on a loaded machine (each test's timeout is 120 s); afterAll SIGKILLs what is left.
    TEST_CHILD_SELF_EXIT_MS: "115000",
  };
  const serve = spawnBun([BIN.serve], env, children);
  await waitForLine(serve, "webhook-inbox listening on", 20_000);
  const worker = mode === "sync" ? undefined : spawnBun([BIN.worker], env, children);
  const sink = startSink();
  cleanups.push(() => sink.stop());
  const dispatch = spawnBun(
    [BIN.dispatch, ...(process.env.FAILOVER_DISPATCH_NO_LISTEN ? ["--no-listen"] : [])],
    {
      ...env,
      OUTBOX_SINK_URL: sink.url,
      OUTBOX_SINK_SECRET: SINK_SECRET,
      OUTBOX_POLL_MS: "200",
      OUTBOX_LEASE_MS: "4000",
      OUTBOX_TIMEOUT_MS: "2000",
      OUTBOX_BACKOFF_BASE_MS: "100",
      OUTBOX_BACKOFF_CAP_MS: "1000",
      OUTBOX_CONCURRENCY: "4",
      LOG_LEVEL: process.env.FAILOVER_DEBUG ? "info" : "warn",
    },
    children,
  );
  const load = startLoad(port, fake.store, `${mode}_${synchronous ? "s" : "a"}`);
  await Bun.sleep(1_500);
  if (!synchronous) {
    pair.partition(); // the standby receives no more WAL: acknowledged commits now live on the primary only
    await Bun.sleep(800);
  }
  const killedAt = Date.now();
  pair.killPrimary();
  await Bun.sleep(300);
  await pair.promote();
  // Recovered: the receiver answers 2xx again, without a restart, to a delivery sent after the kill.
  await waitUntil("a 2xx after the failover", async () => recovery(load.answers, killedAt).recoverMs !== undefined, { timeoutMs: 20_000 });
  await Bun.sleep(500);
  await load.stop();
  const db: Db = connect(pair.urlOf(pair.standbyPort), { max: 2 });
  cleanups.push(() => db.end({ timeout: 1 }));
  const events = load.answers.length;
  // Every event Stripe listed ends applied once: the acknowledged ones (some lost with the old primary) and
  // those answered 503, which Stripe would retry and the backfill finds anyway.
  await waitUntil(
    `a ledger entry for each of ${events} events`,
    async () => (await db<{ n: number }[]>`select count(distinct invoice_id)::int as n from ledger_entries`)[0]!.n === events,
    { timeoutMs: 30_000 },
  ).catch(async (err: Error) => {
    // Say where the missing ones are: inbox rows by state, and whether the worker still runs.
    const states = await db`
      select count(*)::int as n, source, outcome, processed_at is not null as processed, needs_review_at is not null as parked
        from webhook_inbox group by 2, 3, 4, 5`;
    const ledger = await db`select count(distinct invoice_id)::int as n from ledger_entries`;
    throw new Error(
      `${err.message}: ledger ${JSON.stringify(ledger)}, inbox ${JSON.stringify(states)}, worker exit ${worker?.child.exitCode}, ` +
        `worker stdout tail ${JSON.stringify(worker?.lines.slice(-8))}`,
    );
  });
  const rows = await db<
    { event_id: string; source: string; outcome: string | null }[]
  >`select event_id, source, outcome from webhook_inbox`;
  const source = new Map(rows.map((r) => [r.event_id, r.source]));
  const acked = load.answers.filter(acknowledged);
  // Lost: acknowledged as new (not `duplicate`), yet the row that survived is the backfill's. A delivery that
  // reached the new primary after the backfill had recorded its event is answered `duplicate`: not a loss.
  const lost = lostAcknowledged(load.answers, source);
  const backfilledFirst = acked.filter((a) => source.get(a.eventId) === "api").length - lost.length;
  const result = { ...recovery(load.answers, killedAt), lost: lost.length, backfilledFirst, events, acknowledged: acked.length };
  // Applied exactly once: one inbox row and one ledger entry per event, one outbox message id per invoice.
  expect(rows.length).toBe(events);
  expect(rows.every((r) => r.outcome === "processed")).toBe(true);
  expect((await db<{ n: number }[]>`select count(*)::int as n from ledger_entries`)[0]!.n).toBe(events);
  const outbox = await db<{ n: number; ids: number }[]>`select count(*)::int as n, count(distinct message_id)::int as ids from outbox`;
  expect(outbox[0]).toEqual({ n: events, ids: events });
  // The dispatcher, reconnected on its own, publishes every message of the surviving outbox to the sink.
  await waitUntil(
    "every outbox row published",
    async () => (await db<{ n: number }[]>`select count(*)::int as n from outbox where published_at is null`)[0]!.n === 0,
    { timeoutMs: 30_000 },
  ).catch(async (err: Error) => {
    // Say which rows wait and why: attempts, when due, parked, the last error, and the dispatcher's last lines.
    const waiting = await db`
      select id, attempts, available_at > now() as later, needs_review_at is not null as parked, last_error
        from outbox where published_at is null order by id limit 5`;
    throw new Error(
      `${err.message}: ${JSON.stringify(waiting)}, dispatch exit ${dispatch.child.exitCode}, ` +
        `dispatch stdout tail ${JSON.stringify(dispatch.lines.slice(-8))}`,
    );
  });
  const sinkSaw = await sinkReport(db, sink.ids);
  const sinkDuplicates = sinkSaw.seenTwice;
  console.log(
    `failover ${synchronous ? "synchronous" : "asynchronous"} replication, ${mode} mode: recovered in ${result.recoverMs} ms, ` +
      `${result.status503} × 503, other non-2xx ${JSON.stringify(result.other)}, ${result.lost} acknowledged event(s) lost then recovered, ` +
      `${result.backfilledFirst} recorded by the backfill before their delivery reached the new primary ` +
      `(${result.acknowledged} acknowledged of ${events}); sink: ${sinkSaw.deliveries} deliveries of ${sinkSaw.messages} messages, ` +
      `${sinkDuplicates} seen twice or more`,
  );
  // Every message reached the sink, and the sink saw no message the surviving outbox does not have: one
  // re-created by the recovery came under the id it had before the failover.
  expect(sinkSaw.missing).toEqual([]);
  expect(sinkSaw.unknown).toEqual([]);
  // Reconnected without a restart.
  expect(serve.child.exitCode).toBeNull();
  if (worker) expect(worker.child.exitCode).toBeNull();
  expect(dispatch.child.exitCode).toBeNull();
  if (process.env.FAILOVER_DEBUG)
    console.log(
      serve.lines
        .filter((l) => /"status":5|error/.test(l))
        .slice(0, 8)
        .join("\n"),
    );
  // And each stops on SIGTERM after the failover (within 20 s; one that does not is named, with its output).
  const stopped = Object.fromEntries(
    await Promise.all(
      Object.entries({ serve, dispatch, ...(worker ? { worker } : {}) }).map(async ([name, c]) => {
        process.kill(c.child.pid, "SIGTERM");
        const code = await Promise.race([c.child.exited, Bun.sleep(20_000).then(() => "still running after 20 s")]);
        if (code !== 0) {
          const stderr = typeof code === "number" ? (await c.stderr).slice(-800) : "(running)";
          console.log(
            `${name} on SIGTERM after the failover: ${code}; stdout tail ${JSON.stringify(c.lines.slice(-6))}; stderr tail ${stderr}`,
          );
        }
        return [name, code] as const;
      }),
    ),
  );
  // The receiver stops cleanly. The worker and the dispatcher stop too, but not always cleanly: after a failover
  // one sometimes waits on a query that never returns (likely postgres.js 3.4.9's multi-host connect,
  // porsager/postgres#1174; docs/failover.md), and the stop bound (--timeout-ms + 10 s: 12 s here) then ends it
  // with stop_timeout and exit 1, which loses nothing (its leases run out). Never left running.
  expect(stopped.serve).toBe(0);
  expect(typeof stopped.dispatch).toBe("number");
  if (worker) expect(typeof stopped.worker).toBe("number");
  return { ...result, sinkDuplicates };
}

const named = "failover test: no PostgreSQL binaries (initdb, pg_ctl, postgres) found";
const required = (process.env.CI && !["false", "0"].includes(process.env.CI)) || process.env.REQUIRE_FAILOVER_POSTGRES === "1";
if (!binaries && required) throw new Error(`${named}, and CI or REQUIRE_FAILOVER_POSTGRES=1 is set`);
const maybe = binaries ? test : test.skip;
if (!binaries) console.log(`skip: ${named}`);

for (const mode of ["sync", "async", "hybrid"] as const) {
  maybe(
    `a failover under synchronous replication in ${mode} mode answers 503 during the switch, never 2xx for a lost commit, and receiver, worker and dispatcher reconnect without a restart`,
    async () => {
      const r = await scenario(mode, true);
      expect(r.lost).toBe(0);
      expect(r.other).toEqual([]);
    },
    120_000,
  );
}

for (const mode of ["sync", "async", "hybrid"] as const) {
  maybe(
    `a failover under asynchronous replication in ${mode} mode loses acknowledged events, and the primary-change backfill records and applies each once, its outbox messages under their old ids`,
    async () => {
      const r = await scenario(mode, false);
      expect(r.lost).toBeGreaterThan(0); // the partition did lose acknowledged commits: the recovery was needed
      // In sync mode the receiver writes the outbox row in the delivery's transaction and the dispatcher (woken by
      // NOTIFY) sends it within milliseconds, so messages the sink had from the old primary came again, under the
      // same ids (the check above that the sink saw no unknown id is then the proof). In async and hybrid mode the
      // worker may not have applied the lost events before the crash: there duplicates are printed, not required.
      if (mode === "sync") expect(r.sinkDuplicates).toBeGreaterThan(0);
      expect(r.other).toEqual([]);
    },
    120_000,
  );
}
