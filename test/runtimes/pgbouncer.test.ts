// Through PgBouncer (Debian package) in transaction pooling mode with DATABASE_POOLER=transaction: why
// prepared statements must be off there, the fixture lifecycle through the app, 8 concurrent deliveries,
// the worker polling instead of LISTEN, and a bounded `bun run chaos` whose children all use PgBouncer.
// Without DATABASE_POOLER: no 2xx for an unsaved event in any mode, and the start-up refusal.
// PgBouncer missing is one skip naming how to install it, and a failure in CI (.ci/run installs it).
import postgres from "postgres";
import { afterAll, beforeAll, expect, test } from "bun:test";
import { spawn } from "node:child_process";
import { connect, isDatabaseUnavailable, type Db } from "../../src/db/db.ts";
import type { App } from "../../src/receiver/app.ts";
import { deliver } from "../../src/dev/deliver.ts";
import { mulberry32, shuffleInPlace } from "../../src/dev/random.ts";
import { billingHandlers } from "../../src/handlers/billing.ts";
import { detectTransactionPooler } from "../../src/db/pooler-check.ts";
import { DatabaseWaitError, waitForDatabase } from "../../src/db/wait-for-database.ts";
import { receiveAsync, receiveSync } from "../../src/receiver/receive.ts";
import { connectReceiver, loadServerConfig, receiverApp } from "../../src/runtime/receiver.ts";
import { adminUrl, count, eventBody, freshDatabase, invoice, lifecycle, SECRET, signedRequest, verified } from "../support/helpers.ts";
import { waitUntil } from "../support/wait-until.ts";
import { expectLifecycleRows } from "./lifecycle-rows.ts";
import { startPgBouncer, type PgBouncer } from "./pgbouncer.ts";
import { tcpGate } from "./tcp-gate.ts";
import { requireBinary } from "../support/support-binary.ts";
import { ROOT, serverPid } from "./server-process.ts";

type Fresh = Awaited<ReturnType<typeof freshDatabase>>;

let bouncer: PgBouncer;
const pools: Db[] = [];
const databases: Fresh[] = [];
const stops: (() => Promise<void>)[] = [];

/** A fresh database, dropped in afterAll, and its name. */
async function database(): Promise<Fresh & { name: string }> {
  const fresh = await freshDatabase();
  databases.push(fresh);
  return { ...fresh, name: new URL(fresh.url).pathname.slice(1) };
}

/** A pool through PgBouncer, closed in afterAll. */
function viaBouncer(name: string, options: Parameters<typeof connect>[1]): Db {
  const db = connect(bouncer.url(name), options);
  pools.push(db);
  return db;
}

/** `promise`, or an error naming `what` after `ms` (a bound, so a wedged pooler fails instead of hanging). */
function within<T>(ms: number, what: string, promise: Promise<T>): Promise<T> {
  let timer: Timer | undefined;
  const timeout = new Promise<never>(
    (_, reject) => (timer = setTimeout(() => reject(new Error(`${what} did not settle within ${ms} ms`)), ms)),
  );
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

/**
 * A PgBouncer whose server has just gone down, and a pool of one connection through it that logged in
 * while it was up: PgBouncer keeps that client and queues its next query until it gets a server
 * connection again (query_wait_timeout, 120 s). Both are released in afterAll.
 */
async function bouncerWithServerDown(
  database: string,
  options: Parameters<typeof connect>[1] = {},
  queryWaitTimeoutSec?: number,
): Promise<{ db: Db; down: PgBouncer }> {
  const gate = await tcpGate(adminUrl());
  await gate.open();
  const down = await startPgBouncer(gate.url, { queryWaitTimeoutSec });
  stops.push(async () => {
    await down.stop();
    await gate.shut();
  });
  const db = connect(down.url(database), { max: 1, pooler: "transaction", ...options });
  pools.push(db);
  await db`select 1`;
  await gate.shut();
  return { db, down };
}

/**
 * The lifecycle fixtures `rounds` times, each round's event ids made distinct, shuffled, posted to `app`
 * `concurrency` at a time. Returns the ids of the events answered 2xx other than `duplicate`.
 */
async function deliverRounds(app: App, rounds: number, concurrency: number): Promise<string[]> {
  const bodies = Array.from({ length: rounds }, (_, round) =>
    lifecycle().map(({ body }) => {
      const event = JSON.parse(body) as { id: string };
      return JSON.stringify({ ...event, id: `${event.id}_r${round}` });
    }),
  ).flat();
  shuffleInPlace(bodies, mulberry32(60));
  const acknowledged: string[] = [];
  const next = async (): Promise<void> => {
    for (let body = bodies.pop(); body !== undefined; body = bodies.pop()) {
      const response = await app.fetch(await signedRequest("http://receiver.test/webhooks/stripe", body));
      const reply = (await response.json()) as { outcome?: string; event_id?: string };
      if (response.ok && reply.outcome !== "duplicate" && reply.event_id) acknowledged.push(reply.event_id);
    }
  };
  await Promise.all(Array.from({ length: concurrency }, next));
  return acknowledged;
}

requireBinary("pgbouncer", "apt-get install pgbouncer", () => {
  beforeAll(async () => {
    // Four server connections for every client: the pooling is real, clients share backends.
    bouncer = await startPgBouncer(adminUrl(), { poolSize: 4 });
  });

  // Pools first (their connections go through PgBouncer), then PgBouncer, then the databases (each DROP
  // DATABASE waits for a checkpoint: in parallel, and with more than the default 5 s on a busy machine).
  afterAll(async () => {
    await Promise.all(pools.map((db) => db.end({ timeout: 5 }).catch(() => {})));
    for (const stop of stops) await stop();
    await bouncer?.stop();
    await Promise.all(databases.map((fresh) => fresh.drop().catch(() => {})));
  }, 30_000);

  test('`connect()` with prepared statements fails behind PgBouncer\'s transaction pooling; `pooler: "transaction"` runs the same sequence', async () => {
    const { name } = await database();
    /**
     * a prepares q on one backend while b's transaction holds another; PgBouncer (LIFO) then gives a's
     * transaction a backend where q's name is unknown. Outside a transaction postgres.js re-prepares and
     * retries; inside one the error has already aborted the transaction, so it reaches the caller.
     */
    async function sequence(options: Parameters<typeof connect>[1]): Promise<string> {
      const a = viaBouncer(name, { ...options, max: 1 });
      const b = viaBouncer(name, { ...options, max: 1 });
      try {
        await a`select ${1}::int as q`;
        await b.begin(async (tx) => {
          await tx`select 2 as hold`;
          await a`select ${1}::int as q`;
        });
        await a.begin(async (tx) => tx`select ${2}::int as q`);
        return "ok";
      } catch (err) {
        return `${(err as { code?: string }).code}: ${(err as Error).message}`;
      }
    }
    expect(await within(10_000, "prepare: true", sequence({ prepare: true }))).toMatch(/^26000: prepared statement ".+" does not exist$/);
    expect(await within(10_000, "pooler: transaction", sequence({ pooler: "transaction" }))).toBe("ok");
  }, 30_000);

  test("`receiverApp()` through PgBouncer with DATABASE_POOLER=transaction serves the shuffled, duplicated lifecycle", async () => {
    const fresh = await database();
    const config = loadServerConfig(
      { DATABASE_URL: bouncer.url(fresh.name), DATABASE_POOLER: "transaction", STRIPE_WEBHOOK_SECRET: SECRET, DB_POOL_MAX: "8" },
      "test",
    );
    const db = connectReceiver(config.databaseUrl, config, "webhook-inbox test");
    pools.push(db);
    const app = receiverApp(config, db, { log: () => {} });
    const summary = await deliver(lifecycle(), {
      url: "http://receiver.test/webhooks/stripe",
      secret: SECRET,
      copies: 3,
      shuffle: true,
      seed: 11,
      concurrency: 8,
      fetch: (r) => app.fetch(r),
    });
    expect(summary.outcomes).toEqual({ processed: 11, ignored: 1, duplicate: 24 });
    await expectLifecycleRows(fresh.db);
  }, 30_000);

  test("`receiveSync()` through PgBouncer books one payment for 8 concurrent deliveries sharing 4 backends", async () => {
    const fresh = await database();
    const actors = Array.from({ length: 8 }, () => viaBouncer(fresh.name, { max: 1, pooler: "transaction" }));
    await Promise.all(actors.map((a) => a`select 1`));
    const body = eventBody("evt_bouncer_eight", "invoice.paid", invoice({ id: "in_bouncer_eight", status: "paid", amount_paid: 2000 }));
    const target = { provider: "stripe", endpoint: "billing", handlers: billingHandlers };
    const outcomes = await within(
      20_000,
      "8 concurrent deliveries",
      Promise.all(actors.map((a) => receiveSync(a, target, verified(body)))),
    );
    expect(outcomes.filter((o) => o === "processed")).toHaveLength(1);
    expect(outcomes.filter((o) => o === "duplicate")).toHaveLength(7);
    const [row] = await fresh.db<{ inbox: number; ledger: number; outbox: number }[]>`
      select (select count(*)::int from webhook_inbox where event_id = 'evt_bouncer_eight') as inbox,
             (select count(*)::int from ledger_entries where invoice_id = 'in_bouncer_eight') as ledger,
             (select count(*)::int from outbox where aggregate_id = 'in_bouncer_eight') as outbox
    `;
    expect(row).toEqual({ inbox: 1, ledger: 1, outbox: 1 });
  }, 30_000);

  test("`bun run worker` with DATABASE_POOLER=transaction polls instead of LISTEN and drains async rows through PgBouncer", async () => {
    const fresh = await database();
    const config = loadServerConfig(
      { DATABASE_URL: bouncer.url(fresh.name), DATABASE_POOLER: "transaction", STRIPE_WEBHOOK_SECRET: SECRET, INBOX_MODE: "async" },
      "test",
    );
    const db = connectReceiver(config.databaseUrl, config, "webhook-inbox test");
    pools.push(db);
    const app = receiverApp(config, db, { log: () => {} });
    const summary = await deliver(lifecycle(), {
      url: "http://receiver.test/webhooks/stripe",
      secret: SECRET,
      copies: 2,
      shuffle: true,
      seed: 12,
      concurrency: 4,
      fetch: (r) => app.fetch(r),
    });
    expect(summary.outcomes).toEqual({ queued: 11, ignored: 1, duplicate: 12 });

    const env = { ...process.env, DATABASE_URL: bouncer.url(fresh.name), DATABASE_POOLER: "transaction" };
    const worker = spawn("timeout", ["--kill-after=5", "60", process.execPath, "src/bin/worker.ts", "--poll-ms", "100"], {
      cwd: ROOT,
      env,
      stdio: ["ignore", "pipe", "pipe"],
    });
    let output = "";
    worker.stdout.on("data", (c: Buffer) => (output += c.toString("utf8")));
    worker.stderr.on("data", (c: Buffer) => (output += c.toString("utf8")));
    const exited = new Promise<number | null>((resolve) => worker.once("exit", resolve));
    try {
      await waitUntil(
        "the worker to drain the inbox",
        async () => {
          const [row] = await fresh.db<{ n: number }[]>`select count(*)::int as n from webhook_inbox where processed_at is null`;
          return row?.n === 0;
        },
        { timeoutMs: 20_000, intervalMs: 100 },
      );
      expect(output).toContain('"pooler":"transaction","listen":false');
      await expectLifecycleRows(fresh.db);
    } finally {
      // SIGTERM to the worker itself (the child of `timeout`), once.
      const pid = worker.pid === undefined ? undefined : serverPid(worker.pid);
      if (worker.exitCode === null && pid !== undefined) process.kill(pid, "SIGTERM");
    }
    expect(await exited).toBe(0);
  }, 40_000);

  test("`bun run chaos --mode async` through PgBouncer loses nothing and books nothing twice while receivers and workers are SIGKILLed", async () => {
    const fresh = await database();
    // chaos creates (and drops) its own database on the server behind DATABASE_URL: here, through PgBouncer.
    const env = { ...process.env, DATABASE_URL: bouncer.url(fresh.name), DATABASE_POOLER: "transaction" };
    const child = Bun.spawn(
      [
        "timeout",
        "--kill-after=5",
        "100",
        process.execPath,
        "src/dev/bin/chaos.ts",
        "--json",
        "--mode",
        "async",
        "--invoices",
        "40",
        "--faults",
        "kill-receiver,kill-worker",
        "--seed",
        "404",
        "--fault-every-ms",
        "300",
        "--deadline-ms",
        "60000",
      ],
      {
        cwd: ROOT,
        env,
        stdout: "pipe",
        stderr: "pipe",
      },
    );
    const [stdout, stderr, code] = await Promise.all([new Response(child.stdout).text(), new Response(child.stderr).text(), child.exited]);
    const last = stdout.trim().split("\n").pop() ?? "";
    let summary: Record<string, unknown>;
    try {
      summary = JSON.parse(last) as Record<string, unknown>;
    } catch {
      throw new Error(`chaos printed no summary (exit ${code}):\n${stdout.slice(-2000)}\n${stderr.slice(-2000)}`);
    }
    expect({ code, ...summary }).toMatchObject({
      code: 0,
      passed: true,
      lost: 0,
      unacknowledged: 0,
      double_booked: 0,
      wrong_final_state: 0,
      unprocessed: 0,
      unexpected_needs_review: 0,
    });
    expect(Number(summary.receiver_kills) + Number(summary.worker_kills)).toBeGreaterThanOrEqual(2);
    expect(summary.graceful_exits).toBe(summary.children);
    // chaos itself, 2 receivers and 2 workers (and their restarts) all logged in through PgBouncer.
    const logins = bouncer
      .log()
      .split("\n")
      .filter((line) => /login attempt: db=webhook_inbox_chaos_/.test(line));
    expect(logins.length).toBeGreaterThanOrEqual(5);
  }, 110_000);

  test.each(["sync", "hybrid", "async"] as const)(
    "`receiverApp()` through PgBouncer without DATABASE_POOLER (prepared statements on) answers 2xx only for events it saved (%s)",
    async (mode) => {
      const fresh = await database();
      const config = loadServerConfig(
        { DATABASE_URL: bouncer.url(fresh.name), STRIPE_WEBHOOK_SECRET: SECRET, INBOX_MODE: mode, DB_POOL_MAX: "6" },
        "test",
      );
      expect(config.databasePooler).toBe("none");
      const db = connectReceiver(config.databaseUrl, config, "webhook-inbox test");
      pools.push(db);
      const app = receiverApp(config, db, { log: () => {} });
      const acknowledged = await deliverRounds(app, 40, 6);
      expect(acknowledged.length).toBeGreaterThan(0);
      const saved = new Set((await fresh.db<{ event_id: string }[]>`select event_id from webhook_inbox`).map((r) => r.event_id));
      expect(acknowledged.filter((id) => !saved.has(id))).toEqual([]);
    },
    60_000,
  );

  test("`connect()` behind PgBouncer whose server is down rejects each query with a database-unavailable error and leaves no unhandled rejection", async () => {
    const gate = await tcpGate(adminUrl());
    await gate.open();
    const down = await startPgBouncer(gate.url);
    const unhandled: unknown[] = [];
    const onUnhandled = (err: unknown) => void unhandled.push(err);
    process.on("unhandledRejection", onUnhandled);
    try {
      const warm = connect(down.url("postgres"), { max: 1, pooler: "transaction" });
      await warm`select 1`;
      await warm.end({ timeout: 1 });
      await gate.shut();
      // PgBouncer queues the first query while it connects, then answers new logins with FATAL 08P01
      // server_login_retry; a fresh pool reads the array types first, which that error fails.
      const failures: string[] = [];
      for (let attempt = 0; attempt < 12 && !failures.some((f) => f.includes("server_login_retry")); attempt++) {
        const db = connect(down.url("postgres"), { max: 1, pooler: "transaction" });
        const outcome = await within(1_500, "a query", db`select 1`).then(
          () => "answered",
          (err: unknown) => `${isDatabaseUnavailable(err) ? "unavailable" : "other"}: ${String(err)}`,
        );
        if (!outcome.includes("did not settle")) failures.push(outcome);
        await db.end({ timeout: 0 });
        await Bun.sleep(300);
      }
      await Bun.sleep(500);
      expect(failures.some((f) => f.startsWith("unavailable: PostgresError: server login has been failing"))).toBe(true);
      expect(failures.filter((f) => !f.startsWith("unavailable"))).toEqual([]);
      expect(unhandled.map(String)).toEqual([]);
    } finally {
      process.off("unhandledRejection", onUnhandled);
      await down.stop();
      await gate.shut();
    }
  }, 40_000);

  test("`waitForDatabase()` through PgBouncer whose server is down bounds each attempt and gives up after its limit with one line per attempt", async () => {
    const { db } = await bouncerWithServerDown("postgres");
    const lines: string[] = [];
    const waited = await within(
      30_000,
      "waitForDatabase",
      waitForDatabase(db, { limitMs: 3_000, attemptMs: 1_000, log: (line) => lines.push(line) }).catch((err: unknown) => err),
    );
    expect(waited).toBeInstanceOf(DatabaseWaitError);
    expect(String(waited)).toContain("the database did not answer within 3.0 s");
    expect(String(waited)).toContain("select 1: the database did not answer within 1.0 s");
    expect(lines.length).toBeGreaterThanOrEqual(1);
    expect(lines.every((line) => line.startsWith("Waiting for the database: attempt "))).toBe(true);
  }, 40_000);

  test("`waitForDatabase()` through PgBouncer whose server is down rejects with the reason as soon as it is aborted during an attempt", async () => {
    const { db } = await bouncerWithServerDown("postgres");
    const controller = new AbortController();
    const waiting = waitForDatabase(db, { limitMs: 60_000, attemptMs: 60_000, signal: controller.signal }).catch((err: unknown) => err);
    await Bun.sleep(500);
    controller.abort(new Error("stop requested"));
    expect(String(await within(10_000, "waitForDatabase after abort", waiting))).toBe("Error: stop requested");
  }, 30_000);

  test.each(["sync", "hybrid", "async"] as const)(
    "`receiverApp()` through PgBouncer whose server is down answers 503 database_unavailable with Retry-After once PgBouncer's query_wait_timeout ends the wait (%s)",
    async (mode) => {
      const fresh = await database();
      const config = loadServerConfig(
        {
          DATABASE_URL: bouncer.url(fresh.name),
          DATABASE_POOLER: "transaction",
          STRIPE_WEBHOOK_SECRET: SECRET,
          INBOX_MODE: mode,
          STATEMENT_TIMEOUT_MS: "1000",
        },
        "test",
      );
      // The receiver answers what PostgreSQL (or the pooler) answered; the pooler's own query_wait_timeout
      // bounds how long a delivery waits for a server connection (docs/runtimes.md: PgBouncer).
      const { db } = await bouncerWithServerDown(fresh.name, {}, 2);
      const app = receiverApp(config, db, { log: () => {} });
      const body = eventBody(
        `evt_bouncer_down_${mode}`,
        "invoice.paid",
        invoice({ id: `in_bouncer_down_${mode}`, status: "paid", amount_paid: 2000 }),
      );
      const response = await within(20_000, "a delivery", app.fetch(await signedRequest("http://receiver.test/webhooks/stripe", body)));
      expect(response.status).toBe(503);
      expect(response.headers.get("retry-after")).not.toBeNull();
      expect(((await response.json()) as { error?: string }).error).toBe("database_unavailable");
    },
    30_000,
  );

  test("`waitForDatabase()` fails at once when PgBouncer refuses a startup parameter, naming it", async () => {
    const { name } = await database();
    // A startup parameter PgBouncer does not know (ignore_startup_parameters), sent by a pool of the team's own.
    const db = postgres(bouncer.url(name), { max: 1, onnotice: () => {}, connection: { statement_timeout: 5_000 } });
    pools.push(db);
    const lines: string[] = [];
    const waited = await within(
      20_000,
      "waitForDatabase",
      waitForDatabase(db, { limitMs: 10_000, log: (line) => lines.push(line) }).catch((err: unknown) => err),
    );
    expect(String(waited)).toBe(
      "DatabaseWaitError: the database refused the connection: unsupported startup parameter: statement_timeout (SQLSTATE 08P01)",
    );
    expect(lines).toEqual([]);
  }, 30_000);

  test("`bun run worker` behind PgBouncer in session mode without DATABASE_POOLER starts and drains an async row; in transaction mode it refuses in one line", async () => {
    const fresh = await database();
    const session = await startPgBouncer(adminUrl(), { sessionDatabases: [fresh.name] });
    stops.push(() => session.stop());
    const body = eventBody("evt_bouncer_session", "invoice.paid", invoice({ id: "in_bouncer_session", status: "paid", amount_paid: 2000 }));
    expect(await receiveAsync(fresh.db, { provider: "stripe", endpoint: "billing", handlers: billingHandlers }, verified(body))).toBe(
      "queued",
    );
    const run = (url: string, whileRunning: (output: () => string) => Promise<void>) => {
      const env = { PATH: process.env.PATH ?? "", HOME: process.env.HOME ?? "", DATABASE_URL: url, DATABASE_WAIT_MS: "3000" };
      const worker = spawn("timeout", ["--kill-after=5", "30", process.execPath, "src/bin/worker.ts", "--poll-ms", "100"], {
        cwd: ROOT,
        env,
        stdio: ["ignore", "pipe", "pipe"],
      });
      let stdout = "";
      let stderr = "";
      worker.stdout.on("data", (c: Buffer) => (stdout += c.toString("utf8")));
      worker.stderr.on("data", (c: Buffer) => (stderr += c.toString("utf8")));
      const exited = new Promise<number | null>((resolve) => worker.once("exit", resolve));
      return (async () => {
        try {
          await whileRunning(() => stdout + stderr);
        } finally {
          const pid = worker.pid === undefined ? undefined : serverPid(worker.pid);
          if (worker.exitCode === null && pid !== undefined) process.kill(pid, "SIGTERM");
        }
        return { code: await exited, stdout, stderr: stderr.trim() };
      })();
    };
    const inSession = await run(session.url(fresh.name), async (output) => {
      await waitUntil(
        "the worker to process the row (or exit)",
        async () => {
          const [row] = await fresh.db<{ n: number }[]>`select count(*)::int as n from webhook_inbox where processed_at is null`;
          return row?.n === 0 || /exit|Cannot start/.test(output());
        },
        { timeoutMs: 20_000, intervalMs: 100 },
      );
    });
    expect({ code: inSession.code, stderr: inSession.stderr }).toEqual({ code: 0, stderr: "" });
    expect(await count(fresh.db, "webhook_inbox", "processed_at is null")).toBe(0);
    const refused = Bun.spawn(["timeout", "--kill-after=5", "30", process.execPath, "src/bin/worker.ts"], {
      cwd: ROOT,
      env: { PATH: process.env.PATH ?? "", HOME: process.env.HOME ?? "", DATABASE_URL: bouncer.url(fresh.name), DATABASE_WAIT_MS: "3000" },
      stdout: "pipe",
      stderr: "pipe",
    });
    const [stderr, code] = await Promise.all([new Response(refused.stderr).text(), refused.exited]);
    expect(code).toBe(1);
    expect(stderr.trim().split("\n")).toHaveLength(1);
    expect(stderr).toContain("set DATABASE_POOLER=transaction");
  }, 60_000);

  test("`detectTransactionPooler()` sees PgBouncer's transaction pooling and not a direct connection", async () => {
    const fresh = await database();
    expect(await detectTransactionPooler(bouncer.url(fresh.name))).toBe(true);
    for (let check = 0; check < 3; check++) expect(await detectTransactionPooler(fresh.url)).toBe(false);
  }, 30_000);

  test("`bun run migrate` and `bun run serve` refuse to start through PgBouncer without DATABASE_POOLER, naming it, and start with it or on a direct connection", async () => {
    const fresh = await database();
    const run = async (command: string, env: Record<string, string>) => {
      const child = Bun.spawn(["timeout", "--kill-after=5", "30", process.execPath, command], {
        cwd: ROOT,
        env: { PATH: process.env.PATH ?? "", HOME: process.env.HOME ?? "", STRIPE_WEBHOOK_SECRET: SECRET, PORT: "3341", ...env },
        stdout: "pipe",
        stderr: "pipe",
      });
      const [stdout, stderr, code] = await Promise.all([
        new Response(child.stdout).text(),
        new Response(child.stderr).text(),
        child.exited,
      ]);
      return { code, stderr: stderr.trim(), stdout };
    };
    for (const command of ["src/bin/migrate.ts", "src/bin/serve.ts"]) {
      const refused = await run(command, { DATABASE_URL: bouncer.url(fresh.name) });
      expect({ command, code: refused.code }).toEqual({ command, code: 1 });
      expect(refused.stderr.split("\n")).toHaveLength(1);
      expect(refused.stderr).toContain("set DATABASE_POOLER=transaction");
      expect(refused.stderr).not.toContain(bouncer.url(fresh.name));
    }
    expect(await run("src/bin/migrate.ts", { DATABASE_URL: bouncer.url(fresh.name), DATABASE_POOLER: "transaction" })).toMatchObject({
      code: 0,
      stderr: "",
    });
    expect(await run("src/bin/migrate.ts", { DATABASE_URL: fresh.url })).toMatchObject({ code: 0, stderr: "" });
  }, 60_000);
});
