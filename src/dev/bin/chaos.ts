// Entry file: `bun run chaos [options]`. Runs the real `serve` and `worker` commands as child
// processes against a PostgreSQL it starts (or DATABASE_URL), delivers a Stripe-like storm while
// SIGKILLing receivers and workers and restarting PostgreSQL (or failing it over to its standby), then
// checks the invariants.
// Exit codes: 0 no violation, 1 a violation (or the run could not complete), 2 usage error.
import type { Subprocess } from "bun";
import { appendFileSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { checkStorm, passed } from "../chaos/check.ts";
import { minimumInvoices } from "../chaos/minimum-invoices.ts";
import { generateStorm } from "../chaos/model.ts";
import { sendStorm } from "../chaos/storm.ts";
import { thinStorm } from "../chaos/thin-storm.ts";
import { listStorm, stampStorm } from "../chaos/listed-storm.ts";
import { startFakeStripe } from "../fake-stripe/serve.ts";
import { FakeStripeStore } from "../fake-stripe/store.ts";
import { readPooler } from "../../config.ts";
import { connect } from "../../db/db.ts";
import { mulberry32 } from "../random.ts";
import { migrate } from "../../db/migrate.ts";
import { killPostmaster, supervise, type Supervised } from "../chaos/processes.ts";
import { clockTicks, cpuTicks, postgresCpuTicks } from "../chaos/cpu.ts";
import { parseScale, runScale, scaleTable } from "../chaos/scale.ts";
import { freePort, startEmbeddedPostgres, temporaryDataDir, type EmbeddedServer } from "../../runtime/embedded-postgres.ts";
import { loadMigrations } from "../../runtime/migrations-fs.ts";
import { createScratchDatabase } from "../scratch-database.ts";
import { findBinaries, startReplicatedPair, type ReplicatedPair } from "../replicated-postgres.ts";
import { onStopSignals } from "../../runtime/signals.ts";

const USAGE = `Usage: bun run chaos [options]
  --mode sync|async|hybrid   processing mode of the receivers (default sync; async with --scale)
  --invoices N               invoice lifecycles in the storm (default 100; ~6 events each: invoices, refunds, disputes);
                             with restart-db, outage or failover among the faults at least ⌈2 s × --rate ÷ 6⌉ (50 at the
                             default rate; fewer is refused with exit 2): the storm must send for 2 s for them
                             to happen while it runs
  --poison N                 extra events a handler can never apply; they must end needs-review (default 0)
  --senders N                concurrent Stripe-like senders (default 8)
  --rate N                   deliveries per second over all senders (default 150)
  --receivers N, --workers N receiver and worker processes (default 2 and 2; no workers in sync mode)
  --faults LIST              kill-receiver,kill-worker,restart-db,outage,failover (default all but failover;
                             "none" for none; --thin leaves the outage out; with --scale kill-receiver,kill-worker, the only ones allowed)
                             failover: the storm runs against a primary and a streaming standby (the embedded
                             PostgreSQL binaries, else Debian's) under synchronous replication
                             (synchronous_standby_names = 'standby1', synchronous_commit = on: a commit, and so
                             a 2xx, returns only once the standby has flushed it, so no acknowledged event can
                             be lost); DATABASE_URL lists both with target_session_attrs=primary; 1.5 s into the
                             storm (after restart-db, which then restarts the primary) the primary is SIGKILLed
                             and the standby promoted; receivers and workers must reconnect by themselves.
                             Not with DATABASE_URL (exit 2)
  --one-kill-each            instead of random kills every --fault-every-ms: SIGKILL one receiver once a third of
                             the events are acknowledged and one worker at half, each started again 100–500 ms later
  --scale LIST               e.g. 1x1,2x2,4x4 (receivers x workers): one run per configuration, one after the other,
                             each with --one-kill-each and the same storm (--invoices, --seed, --senders, --rate:
                             default unpaced), then a table: events/s, CPU ms per event of the receivers and workers
                             and of the PostgreSQL server (utime+stime from /proc), kills, end state
  --no-listen                workers poll only (\`worker --no-listen\`): no LISTEN, no NOTIFY wake-ups
  --thin                     deliver the storm as thin event notifications to a thin endpoint; workers fetch
                             each object from a local fake Stripe API that answers 5% of requests with 429
  --outage-ms N              outage: every receiver down this long, once (default 8000), longer than
  --give-up-ms N             the senders' retries: a delivery failing this long is given up, as Stripe
                             gives up after three days (default 5000); then \`reconcile events\` recovers
                             those from a fake Stripe Events API
  --fault-every-ms N         mean time between faults (default 700)
  --deadline-ms N            give up on an unacknowledged event after this (default 90000, or three times
                             the time the storm's deliveries take at --rate when that is longer)
  --seed N                   reproducible storm and fault schedule (default: random, printed)
  --json                     print the summary as one JSON line at the end
With DATABASE_URL a fresh database is created on that server (and dropped afterwards; restart-db is
skipped: only an embedded server can be restarted); otherwise a throwaway embedded PostgreSQL is used (with
--faults failover, a throwaway primary and standby).`;

const SECRET = "whsec_chaos_0123456789abcdefghijklmn";
const FAULTS = ["kill-receiver", "kill-worker", "restart-db", "outage", "failover"] as const;
/** The faults `--faults` means when not given: all but failover, which needs a replicated pair. */
const DEFAULT_FAULTS = FAULTS.filter((f) => f !== "failover");
/** When the failover is due, ms into the storm (restart-db, due at 1 s, goes first). */
const FAILOVER_AT_MS = 1_500;
const API_KEY = "sk_test_chaos0123456789";

function usage(message: string): never {
  console.error(`${message}\n\n${USAGE}`);
  process.exit(2);
}

const { values: o } = (() => {
  try {
    return parseArgs({
      options: {
        mode: { type: "string" },
        invoices: { type: "string", default: "100" },
        poison: { type: "string", default: "0" },
        senders: { type: "string", default: "8" },
        rate: { type: "string" },
        receivers: { type: "string", default: "2" },
        workers: { type: "string", default: "2" },
        faults: { type: "string" },
        "one-kill-each": { type: "boolean", default: false },
        scale: { type: "string" },
        "no-listen": { type: "boolean", default: false },
        "fault-every-ms": { type: "string", default: "700" },
        "deadline-ms": { type: "string" },
        "outage-ms": { type: "string", default: "8000" },
        "give-up-ms": { type: "string", default: "5000" },
        seed: { type: "string", default: String(Math.floor(Math.random() * 1e9)) },
        json: { type: "boolean", default: false },
        thin: { type: "boolean", default: false },
        help: { type: "boolean", short: "h", default: false },
      },
    });
  } catch (err) {
    usage(err instanceof Error ? err.message : String(err));
  }
})();
if (o.help) {
  console.log(USAGE);
  process.exit(0);
}
const num = (name: keyof typeof o, min: number): number => {
  const n = Number(o[name]);
  if (!Number.isSafeInteger(n) || n < min) usage(`--${name} must be a whole number ≥ ${min}, got "${String(o[name])}"`);
  return n;
};
// Unpaced under --scale (the throughput is what is measured), 150/s otherwise.
o.rate ??= o.scale !== undefined ? "1000000" : "150";
const mode = o.mode ?? (o.scale !== undefined ? "async" : "sync");
if (mode !== "sync" && mode !== "async" && mode !== "hybrid") usage(`--mode must be sync, async or hybrid, got "${mode}"`);
const faultList = o.faults ?? (o.scale !== undefined ? "kill-receiver,kill-worker" : DEFAULT_FAULTS.join(","));
const faults = new Set(faultList === "none" ? [] : faultList.split(","));
for (const f of faults) if (!(FAULTS as readonly string[]).includes(f)) usage(`Unknown fault "${f}": use ${FAULTS.join(", ")} or none`);
const seed = num("seed", 0);
if (o.scale !== undefined) await scaleRun(o.scale);
// The outage's recovery reads the classic Events API; a thin storm is recovered by its own fetches.
if (o.thin) faults.delete("outage");
const outage = faults.has("outage");
if (o["one-kill-each"] && (outage || faults.has("restart-db")))
  usage("--one-kill-each schedules only kill-receiver and kill-worker: add --faults kill-receiver,kill-worker");
if (outage && num("give-up-ms", 1) >= num("outage-ms", 1))
  usage("--give-up-ms must be shorter than --outage-ms: the outage must outlast the senders' retries");
// The faults due at a time into the storm happen only while it is sent: a storm too small for them is
// refused here, before anything starts (restart-db is skipped with DATABASE_URL, see below).
const failover = faults.has("failover");
if (failover && process.env.DATABASE_URL)
  usage(
    "--faults failover starts its own primary and standby: unset DATABASE_URL (a server this command does not own cannot be failed over)",
  );
const timedFaults = [...faults].filter((f) => f === "outage" || f === "failover" || (f === "restart-db" && !process.env.DATABASE_URL));
if (timedFaults.length > 0 && num("invoices", 1) < minimumInvoices(num("rate", 1)))
  usage(
    `--invoices must be at least ${minimumInvoices(num("rate", 1))} at --rate ${num("rate", 1)} with the faults ${timedFaults.join(", ")}, got ${num("invoices", 1)}: ` +
      "a smaller storm is sent before they are due (it must send for 2 s); use more --invoices, a lower --rate, or --faults without them",
  );
// A thin endpoint is processed by workers whatever --mode says (it applies to the classic billing endpoint).
const workerCount = mode === "sync" && !o.thin ? 0 : num("workers", 1);
const random = mulberry32(seed);
const started = Date.now();
const workDir = mkdtempSync(join(tmpdir(), "webhook-inbox-chaos-"));
const logFile = join(workDir, "children.log");
const log = (line: string) => appendFileSync(logFile, `${line}\n`);
const say = (line: string) => (o.json ? log(`chaos ${line}`) : console.log(line));

// 1. The database: a throwaway embedded cluster (restartable), a throwaway primary and standby (failover),
// or a fresh database on DATABASE_URL.
let embedded: EmbeddedServer | undefined;
let pair: ReplicatedPair | undefined;
let dataDir: string | undefined;
let url: string;
let dropDatabase = async () => {};
// SIGTERM/SIGINT before the verdict (a `kill` of `bun run chaos`, a CI timeout, Ctrl-C): SIGKILL every
// child, stop the throwaway cluster, remove this run's folders, exit 143/130 with no verdict.
const children: Supervised[] = [];
onStopSignals(
  (signal) => {
    console.error(`chaos: ${signal}: stopping the children and the throwaway database; no verdict`);
    void (async () => {
      await Promise.all(children.map((c) => c.stop("SIGKILL").catch(() => null)));
      if (dataDir) await killPostmaster(dataDir).catch(() => {});
      pair?.destroy();
      await dropDatabase().catch(() => {});
      if (dataDir) rmSync(dirname(dataDir), { recursive: true, force: true });
      rmSync(workDir, { recursive: true, force: true });
      process.exit(signal === "SIGINT" ? 130 : 143);
    })();
  },
  () => process.exit(1),
);
if (process.env.DATABASE_URL) {
  const scratch = await createScratchDatabase(process.env.DATABASE_URL, "webhook_inbox_chaos");
  url = scratch.url;
  dropDatabase = scratch.drop;
  if (faults.delete("restart-db")) say("restart-db skipped: DATABASE_URL points at a server this command does not own");
} else if (failover) {
  const binaries = await findBinaries();
  if (!binaries) {
    console.error("chaos: --faults failover needs the PostgreSQL binaries initdb, pg_ctl and postgres (embedded or Debian's); none found");
    process.exit(1);
  }
  pair = await startReplicatedPair(binaries, { synchronous: true });
  url = pair.url;
  say(`chaos: primary on port ${pair.primaryPort}, synchronous standby on ${pair.standbyPort} (${binaries.label})`);
} else {
  dataDir = await temporaryDataDir("webhook-inbox-chaos-pg-");
  embedded = await startEmbeddedPostgres({ dir: dataDir, port: 0 });
  url = embedded.url;
}
// DATABASE_POOLER=transaction (DATABASE_URL through PgBouncer) also reaches the children through the environment.
const db = connect(url, { max: 2, applicationName: "webhook-inbox chaos", pooler: readPooler(process.env, []) });
await migrate(db, loadMigrations());

// 2. The real commands as children: receivers on fixed ports (kept across restarts), workers.
// --thin: a thin endpoint next to billing, and the fake Stripe API the workers read (its objects come with the storm).
const THIN_API_KEY = "sk_test_chaosthinchaos";
const thinApi = o.thin ? startFakeStripe({ store: new FakeStripeStore(THIN_API_KEY) }) : undefined;
if (thinApi) thinApi.store.rateLimitFraction = 0.05;
const thinEnv: Record<string, string> = thinApi
  ? { STRIPE_ENDPOINTS: "thin", STRIPE_WEBHOOK_SECRET_THIN: SECRET, STRIPE_ENDPOINT_KIND_THIN: "thin" }
  : {};
const apiEnv: Record<string, string> = thinApi
  ? { ...thinEnv, STRIPE_API_KEY: THIN_API_KEY, STRIPE_API_BASE: thinApi.url, STRIPE_API_REQUESTS_PER_SEC: "500" }
  : {};
const receiverEnv = { DATABASE_URL: url, STRIPE_WEBHOOK_SECRET: SECRET, INBOX_MODE: mode, DB_POOL_MAX: "4", HOST: "127.0.0.1", ...thinEnv };
const ports = await Promise.all(Array.from({ length: num("receivers", 1) }, () => freePort()));
const bin = (name: string) => fileURLToPath(new URL(`../../bin/${name}.ts`, import.meta.url));
const receivers = ports.map((port, i) =>
  supervise(`receiver${i}`, [bin("serve")], { ...receiverEnv, PORT: String(port) }, log, /listening on/),
);
const workerArgs = [
  bin("worker"),
  "--poll-ms",
  "250",
  "--lease-ms",
  "4000",
  "--timeout-ms",
  "3000",
  "--backoff-base-ms",
  "100",
  "--backoff-cap-ms",
  "1000",
  ...(o["no-listen"] ? ["--no-listen"] : []),
];
const workers = Array.from({ length: workerCount }, (_, i) =>
  supervise(`worker${i}`, workerArgs, { DATABASE_URL: url, ...apiEnv }, log, /"worker":"started"/),
);
children.push(...receivers, ...workers);
for (const child of children) child.start();
await Promise.all(ports.map((port) => waitReady(`http://127.0.0.1:${port}`)));

// 3. Faults while the storm runs.
const counts = { receiverKills: 0, workerKills: 0, dbRestarts: 0, outages: 0, failovers: 0 };
// The outage begins a third of the way into the storm's expected sending time.
const outageAtMs = () => (storm.events.length * 2 * 1000) / num("rate", 1) / 3;
let storming = true;
let acknowledgedSoFar = 0;
const killedTicks = { receivers: 0, workers: 0 };
const faultLoop = (async () => {
  let dbRestartDue = faults.has("restart-db");
  let outageDue = outage;
  let failoverDue = failover;
  const stormStarted = Date.now();
  // The storm is defined once the main code reaches its first await (sendStorm): wait for that.
  if (o["one-kill-each"]) return sleep(10).then(oneKillEach);
  await sleep(300);
  while (storming) {
    const kinds = [...faults].filter(
      (f) => f !== "restart-db" && f !== "outage" && f !== "failover" && (f !== "kill-worker" || workers.length > 0),
    );
    // PostgreSQL goes down once, about a second into the storm, while deliveries are in flight.
    if (dbRestartDue && Date.now() - stormStarted > 1_000) {
      dbRestartDue = false;
      await restartDatabase();
    } else if (failoverDue && Date.now() - stormStarted > FAILOVER_AT_MS) {
      failoverDue = false;
      await failOver();
    } else if (outageDue && Date.now() - stormStarted > outageAtMs()) {
      outageDue = false;
      await receiverOutage();
    } else if (kinds.length > 0) {
      await killAndRestart(kinds[Math.floor(random() * kinds.length)] === "kill-receiver" ? "kill-receiver" : "kill-worker");
    }
    // Wake up when the restart or the outage falls due rather than sleep past it (the storm may end meanwhile).
    const dueInMs =
      Math.min(dbRestartDue ? 1_000 : Infinity, failoverDue ? FAILOVER_AT_MS : Infinity, outageDue ? outageAtMs() : Infinity) -
      (Date.now() - stormStarted) +
      1;
    await sleep(Math.max(0, Math.min(num("fault-every-ms", 1) * (0.5 + random()), dueInMs)));
  }
})();

/** SIGKILLs one receiver or worker picked at random and starts it again 100–500 ms later, as a process manager would. */
async function killAndRestart(kind: "kill-receiver" | "kill-worker"): Promise<void> {
  const pool = kind === "kill-receiver" ? receivers : workers;
  const victim = pool[Math.floor(random() * pool.length)];
  if (!victim?.running) return;
  // Its CPU so far, for the split by role (the total counts it through this process's cutime anyway).
  killedTicks[kind === "kill-receiver" ? "receivers" : "workers"] += cpuTicks([victim.pid]);
  await victim.stop("SIGKILL");
  kind === "kill-receiver" ? counts.receiverKills++ : counts.workerKills++;
  log(`chaos SIGKILL ${victim.name}`);
  await sleep(100 + random() * 400);
  victim.start();
}

/** --one-kill-each: one receiver killed once a third of the events are acknowledged, one worker at half. */
async function oneKillEach(): Promise<void> {
  const plan = [
    ["kill-receiver", 1 / 3],
    ["kill-worker", 1 / 2],
  ] as const;
  for (const [kind, share] of plan) {
    if (!faults.has(kind) || (kind === "kill-worker" && workers.length === 0)) continue;
    while (storming && acknowledgedSoFar < storm.events.length * share) await sleep(10);
    if (!storming) return;
    await killAndRestart(kind);
  }
}

/** Every receiver down for --outage-ms (longer than the senders' retries), then up again. */
async function receiverOutage(): Promise<void> {
  log("chaos outage: every receiver down");
  await Promise.all(receivers.map((r) => r.stop("SIGKILL")));
  counts.outages++;
  await sleep(num("outage-ms", 1));
  for (const r of receivers) r.start();
  log("chaos outage over");
}

/**
 * The failover: SIGKILL of the primary's postmaster while deliveries are in flight, 300 ms of no primary
 * (deliveries answered 503), then `pg_ctl promote` of the synchronous standby. Nobody restarts the
 * receivers or workers: they find the new primary through DATABASE_URL's second host.
 */
async function failOver(): Promise<void> {
  if (!pair) return;
  log("chaos SIGKILL of the primary");
  pair.killPrimary();
  await sleep(300);
  await pair.promote();
  counts.failovers++;
  log("chaos standby promoted");
}

async function restartDatabase(): Promise<void> {
  if (pair) {
    // Before the failover (due later): an immediate shutdown and start of the primary; the standby follows again.
    log("chaos immediate shutdown and start of the primary");
    await pair.restartPrimary();
    counts.dbRestarts++;
    log("chaos primary restarted");
    return;
  }
  if (!dataDir || !embedded) return;
  log("chaos immediate shutdown of PostgreSQL");
  await killPostmaster(dataDir);
  counts.dbRestarts++;
  await sleep(500 + random() * 1000);
  embedded = await startEmbeddedPostgres({ dir: dataDir, port: embedded.port });
  log("chaos PostgreSQL restarted");
}

// 4. The storm.
const classicStorm = generateStorm({ invoices: num("invoices", 1), poison: num("poison", 0), seed });
stampStorm(classicStorm.events);
const storm = thinApi ? thinStorm(classicStorm, thinApi.store) : classicStorm;
const stripeStore = new FakeStripeStore(API_KEY);
listStorm(stripeStore, storm.events);
const fakeStripe = outage ? startFakeStripe({ store: stripeStore }) : undefined;
say(
  `chaos: ${o.thin ? "thin endpoint" : `mode ${mode}`}, seed ${seed}, ${storm.events.length} events, ${receivers.length} receivers, ${workers.length} workers, faults ${[...faults].join(",") || "none"}`,
);
// CPU and time from the first delivery until the backlog is drained (see measure() below).
const ticksPerSec = clockTicks();
const before = measure();
const commitsBefore = await commits();
const stats = await sendStorm(storm.events, {
  onAcknowledged: (n) => (acknowledgedSoFar = n),
  receivers: ports.map((p) => `http://127.0.0.1:${p}`),
  path: o.thin ? "/webhooks/stripe/thin" : "/webhooks/stripe",
  secret: SECRET,
  senders: num("senders", 1),
  seed,
  ratePerSec: num("rate", 1),
  // A storm that takes longer than the deadline just to send would be cut off and reported as lost acks.
  deadlineMs:
    o["deadline-ms"] !== undefined
      ? num("deadline-ms", 1000)
      : Math.max(90_000, Math.ceil(((storm.events.length * 2) / num("rate", 1)) * 3_000)),
  giveUpMs: outage ? num("give-up-ms", 1) : undefined,
});
const sentAt = Date.now();
storming = false;
await faultLoop;

// 5. Everything up again, the backlog drained, children stopped gracefully.
for (const child of children) child.start();
// What the senders gave up on comes back from Stripe's Events API through the real command.
const reconcile = fakeStripe ? await reconcileEvents(fakeStripe.url) : undefined;
const drained = await waitDrained(60_000);
const after = measure();
// Statistics reach pg_stat_database when a backend is idle, at most once a second: wait for the last ones.
await sleep(1_500);
const commitsAfter = await commits();
// A child restarted a moment ago may not have installed its signal handlers yet: wait before SIGTERM.
await Promise.all([...receivers, ...workers].map((c) => c.ready(30_000)));
const exits = await Promise.all([...receivers, ...workers].map(async (c) => ({ name: c.name, code: await c.stop("SIGTERM") })));

// 6. The verdict.
// With the outage, every event must end in the inbox (by webhook or by backfill): "lost" covers all.
const mustBeRecorded = outage ? new Set(storm.events.map((e) => e.id)) : stats.acknowledged;
const verdict = o.thin
  ? await checkStorm(db, storm, "thin", stats.acknowledged, stats.unacknowledged, "stripe-thin")
  : await checkStorm(db, storm, "billing", mustBeRecorded, stats.unacknowledged);
const [recovered] = await db<{ n: number }[]>`select count(*)::int as n from webhook_inbox where source = 'api'`;
// A run that was asked to restart PostgreSQL but ended before it could proves less than it claims.
const dbRestartMissed = faults.has("restart-db") && counts.dbRestarts === 0;
const outageMissed = outage && counts.outages === 0;
const failoverMissed = failover && counts.failovers === 0;
const reconcileFailed = reconcile !== undefined && reconcile !== 0;
const [inboxRows] = await db<
  { n: number }[]
>`select count(*)::int as n from webhook_inbox where provider = ${o.thin ? "stripe-thin" : "stripe"}`;
const perEventMs = (ticks: number) => Math.round(((ticks * 1000) / ticksPerSec / storm.events.length) * 100) / 100;
const perSec = (until: number) => Math.round(storm.events.length / ((until - before.at) / 1000));
// PostgreSQL's CPU only when this run owns the server and it was not restarted meanwhile (a new postmaster).
const postgresTicks =
  before.postgres !== undefined && after.postgres !== undefined && counts.dbRestarts === 0 ? after.postgres - before.postgres : undefined;
const ok = passed(verdict) && drained && !dbRestartMissed && !outageMissed && !failoverMissed && !reconcileFailed;
const summary = {
  mode: o.thin ? "thin" : mode,
  seed,
  events: stats.events,
  deliveries: stats.deliveries,
  duplicates: stats.duplicates,
  concurrent_duplicates: stats.concurrentDuplicates,
  requests: stats.requests,
  failed_attempts: stats.failedAttempts,
  outcomes: stats.outcomes,
  receiver_kills: counts.receiverKills,
  worker_kills: counts.workerKills,
  db_restarts: counts.dbRestarts,
  ...(thinApi ? { api_429s: thinApi.store.requests.filter((r) => r.status === 429).length } : {}),
  outages: counts.outages,
  failovers: counts.failovers,
  // Deliveries the senders gave up on during the outage, and rows \`reconcile events\` recorded from the API.
  gave_up: stats.gaveUp.length,
  recovered_by_reconcile: recovered?.n ?? 0,
  reconcile_exit: reconcile ?? null,
  // Children that exited without being killed (e.g. a start-up failure), started again by supervise().
  self_exits: children.reduce((n, c) => n + c.selfExits, 0),
  lost: verdict.lost.length,
  unacknowledged: verdict.unacknowledged.length,
  double_booked: verdict.doubleBooked.length,
  wrong_final_state: verdict.wrongState.length,
  unprocessed: verdict.unprocessed,
  unexpected_needs_review: verdict.unexpectedNeedsReview.length,
  poison_parked: verdict.poison.filter((p) => p.parked).length,
  poison: verdict.poison.length,
  graceful_exits: exits.filter((e) => e.code === 0).length,
  children: exits.length,
  duration_s: Math.round((Date.now() - started) / 100) / 10,
  // From the first delivery: events per second until every event was acknowledged, and until applied (drained).
  acknowledged_per_s: perSec(sentAt),
  applied_per_s: perSec(after.at),
  inbox_rows: inboxRows?.n ?? 0,
  // utime+stime (/proc/<pid>/stat) over the same span, per event, ms: the receiver and worker processes
  // (killed ones included), and the PostgreSQL server (postmaster and its children; null on DATABASE_URL).
  app_cpu_ms_per_event: perEventMs(after.app - before.app),
  postgres_cpu_ms_per_event: postgresTicks === undefined ? null : perEventMs(postgresTicks),
  receiver_cpu_ms_per_event: perEventMs(after.receivers - before.receivers),
  worker_cpu_ms_per_event: perEventMs(after.workers - before.workers),
  // Every transaction of the database over the same span (idle claims and NOTIFYs included), per event.
  transactions_per_event: Math.round(((commitsAfter - commitsBefore) / storm.events.length) * 10) / 10,
  passed: ok,
  log: ok ? null : logFile, // kept only when it failed
};
if (!o.json) {
  console.table(
    Object.fromEntries(
      Object.entries(summary)
        .filter(([k]) => !["failed_attempts", "outcomes", "log"].includes(k))
        .map(([k, v]) => [k, { value: v }]),
    ),
  );
  console.log(`outcomes ${JSON.stringify(stats.outcomes)}; failed attempts (retried) ${JSON.stringify(stats.failedAttempts)}`);
  for (const [name, list] of Object.entries({
    lost: verdict.lost,
    unacknowledged: verdict.unacknowledged,
    "double-booked": verdict.doubleBooked,
    "wrong state": verdict.wrongState,
    "unexpected needs-review": verdict.unexpectedNeedsReview,
  })) {
    for (const item of list.slice(0, 20)) console.log(`VIOLATION ${name}: ${item}`);
  }
  for (const p of verdict.poison) console.log(`injected poison ${p.eventId}: ${p.parked ? "needs-review, as expected" : "NOT parked"}`);
  if (!drained) console.log("VIOLATION: the backlog did not drain within 60 s");
  if (failoverMissed) console.log("INCOMPLETE: the storm ended before the failover; use more --invoices or a lower --rate");
  if (outageMissed) console.log("INCOMPLETE: the storm ended before the outage; use more --invoices or a lower --rate");
  if (reconcileFailed) console.log(`VIOLATION: reconcile events exited ${reconcile} (see ${logFile})`);
  if (dbRestartMissed)
    console.log("INCOMPLETE: the storm ended before PostgreSQL could be restarted; use more --invoices or a lower --rate");
  console.log(ok ? "PASSED (child output removed)" : `FAILED: child output kept in ${logFile}`);
} else {
  console.log(JSON.stringify(summary));
}
await db.end({ timeout: 5 });
await fakeStripe?.stop();
await thinApi?.stop();
await embedded?.stop();
pair?.destroy();
await dropDatabase();
if (dataDir) rmSync(dirname(dataDir), { recursive: true, force: true });
if (ok) rmSync(workDir, { recursive: true, force: true });
process.exit(ok ? 0 : 1);

/**
 * Now, and the CPU (clock ticks) used so far by the receivers and workers (live ones, plus what this
 * process reaped: killed ones) and by the embedded PostgreSQL server (undefined on DATABASE_URL).
 */
function measure(): { at: number; app: number; receivers: number; workers: number; postgres: number | undefined } {
  const postmaster = dataDir ? Number(readFileSync(join(dataDir, "postmaster.pid"), "utf8").split("\n")[0]) : undefined;
  const live = (pool: readonly Supervised[]) => cpuTicks(pool.map((c) => (c.running ? c.pid : undefined)));
  return {
    at: Date.now(),
    app: cpuTicks(
      children.map((c) => (c.running ? c.pid : undefined)),
      process.pid,
    ),
    // By role: live processes plus those killed so far (sampled just before the SIGKILL).
    receivers: live(receivers) + killedTicks.receivers,
    workers: live(workers) + killedTicks.workers,
    postgres: postmaster ? postgresCpuTicks(postmaster) : undefined,
  };
}

/** Transactions committed in this run's database so far (pg_stat_database.xact_commit; PostgreSQL manual, "The Cumulative Statistics System"). */
async function commits(): Promise<number> {
  const [row] = await db<{ n: string }[]>`select xact_commit::text as n from pg_stat_database where datname = current_database()`;
  return Number(row?.n ?? 0);
}

/** --scale: one chaos run per configuration as a child process, then the table; exits 0 when every run passed. */
async function scaleRun(list: string): Promise<never> {
  let configs;
  try {
    configs = parseScale(list);
  } catch (err) {
    usage(err instanceof Error ? err.message : String(err));
  }
  for (const f of faults)
    if (f !== "kill-receiver" && f !== "kill-worker") usage(`--scale allows only the faults kill-receiver and kill-worker, got "${f}"`);
  if (o.thin) usage("--scale measures the classic endpoint; leave out --thin");
  const args = ["--mode", mode, "--faults", faults.size === 0 ? "none" : [...faults].join(","), "--one-kill-each", "--seed", String(seed)];
  for (const name of ["invoices", "poison", "senders", "rate", "deadline-ms"] as const) {
    const value = o[name];
    if (value !== undefined) args.push(`--${name}`, String(num(name, 0)));
  }
  if (o["no-listen"]) args.push("--no-listen");
  let current: Subprocess | undefined;
  onStopSignals(
    (signal) => {
      console.error(`chaos --scale: ${signal}: stopping the current run`);
      current?.kill("SIGTERM");
      void (current?.exited ?? Promise.resolve()).then(() => process.exit(signal === "SIGINT" ? 130 : 143));
    },
    () => process.exit(1),
  );
  const chaosPath = fileURLToPath(import.meta.url);
  const rows = await runScale(
    chaosPath,
    configs,
    args,
    (c) => (current = c),
    (line) => (o.json ? undefined : console.log(line)),
  );
  const allPassed = rows.every((r) => r.summary?.passed === true && r.exitCode === 0);
  if (o.json) {
    console.log(
      JSON.stringify({
        mode,
        seed,
        listen: !o["no-listen"],
        configurations: rows.map((r) => ({ receivers: r.receivers, workers: r.workers, exit: r.exitCode, ...r.summary })),
        passed: allPassed,
      }),
    );
  } else {
    console.log(
      `chaos --scale: mode ${mode}${o["no-listen"] ? ", workers --no-listen" : ""}, seed ${seed}, the same storm per configuration; CPU from /proc/<pid>/stat at ${clockTicks()} ticks/s`,
    );
    console.table(scaleTable(rows));
    for (const r of rows)
      if (r.failure !== undefined || r.exitCode !== 0)
        console.log(
          `${r.receivers}x${r.workers} exited ${r.exitCode}${r.failure ? `:\n${r.failure}` : ` (log ${String(r.summary?.log)})`}`,
        );
    console.log(allPassed ? "PASSED" : "FAILED");
  }
  process.exit(allPassed ? 0 : 1);
}

/** Runs \`bun run reconcile events\` against the fake Stripe API at \`apiBase\`; its output goes to the log. Returns its exit code. */
async function reconcileEvents(apiBase: string): Promise<number> {
  const child = Bun.spawn([process.execPath, bin("reconcile"), "events"], {
    env: {
      ...process.env,
      DATABASE_URL: url,
      STRIPE_WEBHOOK_SECRET: SECRET,
      INBOX_MODE: mode,
      STRIPE_API_KEY: API_KEY,
      STRIPE_API_BASE: apiBase,
    },
    stdout: "pipe",
    stderr: "pipe",
  });
  const [out, err, code] = await Promise.all([new Response(child.stdout).text(), new Response(child.stderr).text(), child.exited]);
  for (const line of `${out}${err}`.split("\n").filter(Boolean)) log(`reconcile ${line}`);
  say(`chaos: reconcile events exited ${code}: ${out.split("\n")[0] ?? ""}`);
  return code;
}

async function waitReady(base: string): Promise<void> {
  const deadline = Date.now() + 30_000;
  while (Date.now() < deadline) {
    const ok = await fetch(`${base}/readyz`).then(
      (r) => r.ok,
      () => false,
    );
    if (ok) return;
    await sleep(100);
  }
  throw new Error(`Receiver at ${base} not ready within 30 s (see ${logFile})`);
}

/** Waits until no row waits for a worker (parked rows excluded); false on timeout. */
async function waitDrained(ms: number): Promise<boolean> {
  const deadline = Date.now() + ms;
  while (Date.now() < deadline) {
    const rows = await db<{ n: number }[]>`
      select count(*)::int as n
        from webhook_inbox
       where processed_at is null
         and needs_review_at is null
    `.catch(() => [{ n: -1 }]);
    if (rows[0]?.n === 0) return true;
    await sleep(200);
  }
  return false;
}

function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}
