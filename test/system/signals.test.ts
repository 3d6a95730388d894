// Stop signals of the entry files (src/runtime/signals.ts): the duplicate SIGINT that `bun run`
// delivers on Ctrl-C must not turn a graceful stop into an abrupt exit; a later signal still does.
// The last tests start the real `bun run worker` and `bun run serve` in their own process group and
// signal the group, as a terminal's Ctrl-C does. Only processes this file spawned are signalled, by
// their pid (or their group's), and the embedded cluster it made is stopped through its postmaster.pid.
import { afterAll, expect, test } from "bun:test";
import { spawn, type ChildProcess } from "node:child_process";
import { EventEmitter } from "node:events";
import { rm } from "node:fs/promises";
import { dirname, join } from "node:path";
import postgres from "postgres";
import { freePort, temporaryDataDir } from "../../src/runtime/embedded-postgres.ts";
import { onStopSignals, REPEAT_WINDOW_MS } from "../../src/runtime/signals.ts";
import { stopDevDatabase } from "../../src/runtime/dev-database.ts";
import { eventBody, freshDatabase, invoice, SECRET, signedRequest } from "../support/helpers.ts";

function harness() {
  const source = new EventEmitter();
  let clock = 1_000;
  const calls: string[] = [];
  onStopSignals(
    (signal) => calls.push(`stop ${signal}`),
    () => calls.push("exit now"),
    { source, now: () => clock },
  );
  return { calls, send: (signal: "SIGTERM" | "SIGINT", afterMs = 0) => ((clock += afterMs), source.emit(signal)) };
}

test("`onStopSignals()` stops once on the first signal and ignores a repeat within the window (Ctrl-C under `bun run`)", () => {
  const h = harness();
  h.send("SIGINT");
  h.send("SIGINT", 2);
  h.send("SIGINT", REPEAT_WINDOW_MS - 2);
  expect(h.calls).toEqual(["stop SIGINT"]);
});

test("`onStopSignals()` exits at once on a Ctrl-C later than the window, after SIGINT or SIGTERM alike", () => {
  const h = harness();
  h.send("SIGTERM");
  h.send("SIGINT", REPEAT_WINDOW_MS + 1);
  expect(h.calls).toEqual(["stop SIGTERM", "exit now"]);
  const twice = harness();
  twice.send("SIGINT");
  twice.send("SIGINT", REPEAT_WINDOW_MS + 1);
  expect(twice.calls).toEqual(["stop SIGINT", "exit now"]);
});

test("`onStopSignals()` ignores a repeated SIGTERM however late: a stop is already in progress", () => {
  const h = harness();
  h.send("SIGTERM");
  h.send("SIGTERM", REPEAT_WINDOW_MS + 1);
  h.send("SIGTERM", 10_000);
  const afterCtrlC = harness();
  afterCtrlC.send("SIGINT");
  afterCtrlC.send("SIGTERM", REPEAT_WINDOW_MS + 1);
  expect([h.calls, afterCtrlC.calls]).toEqual([["stop SIGTERM"], ["stop SIGINT"]]);
});

const fresh = await freshDatabase();
const spawned = new Set<ChildProcess>();
/** Data directories of clusters started (through `serve`) by this file; removed even after a timeout. */
const clusters = new Set<string>();
afterAll(async () => {
  for (const child of spawned) if (child.pid !== undefined && child.exitCode === null) process.kill(-child.pid, "SIGKILL");
  for (const dir of clusters) await removeCluster(dir);
  await fresh.drop();
});

/** Stops a cluster `serve` started (it outlives serve, in its own session) by its postmaster's pid, then removes its folder. */
async function removeCluster(dataDir: string): Promise<void> {
  await stopDevDatabase(dataDir).catch(() => {});
  await rm(dirname(dataDir), { recursive: true, force: true });
  clusters.delete(dataDir);
}

test("Ctrl-C to the process group of `bun run worker` stops it gracefully: one stopping line, exit 0", async () => {
  const worker = spawnGroup("worker", ["--poll-ms", "200"], { DATABASE_URL: fresh.url });
  const deadline = Date.now() + 20_000;
  while (!worker.out.stdout.includes('"worker":"started"')) {
    if (worker.child.exitCode !== null || Date.now() > deadline)
      throw new Error(`worker did not start: ${worker.out.stdout} ${worker.out.stderr}`);
    await Bun.sleep(20);
  }
  await ctrlC(worker.child.pid ?? 0);
  const killer = setTimeout(() => worker.child.pid !== undefined && process.kill(-worker.child.pid, "SIGKILL"), 15_000);
  const code = await worker.exited;
  clearTimeout(killer);
  const lines = worker.out.stdout
    .split("\n")
    .filter((l) => l.startsWith("{"))
    .map((l) => JSON.parse(l) as Record<string, unknown>);
  expect(lines.filter((l) => l.worker === "stopping").map(({ worker, signal }) => ({ worker, signal }))).toEqual([
    { worker: "stopping", signal: "SIGINT" },
  ]);
  expect(lines.at(-1)).toMatchObject({ worker: "stopped", level: "info" });
  expect(code).toBe(0);
}, 40_000);

/** Spawns `bun run <script>` leading a new process group (like a shell's foreground job), stdout collected. */
function spawnGroup(script: string, args: string[], env: Record<string, string>) {
  const child = spawn(process.execPath, ["run", script, ...args], {
    cwd: join(import.meta.dir, "..", ".."),
    detached: true,
    stdio: ["ignore", "pipe", "pipe"],
    env: { PATH: process.env.PATH ?? "/usr/bin:/bin", HOME: process.env.HOME ?? "/root", NO_COLOR: "1", ...env },
  });
  spawned.add(child);
  const out = { stdout: "", stderr: "" };
  child.stdout?.on("data", (chunk: Buffer) => (out.stdout += chunk.toString("utf8")));
  child.stderr?.on("data", (chunk: Buffer) => (out.stderr += chunk.toString("utf8")));
  const exited = new Promise<number | null>((resolve) => child.once("exit", (code) => resolve(code)));
  return { child, out, exited };
}

/** Ctrl-C as a terminal sends it: SIGINT to the group, and again 5 ms later (what `bun run` may forward). */
async function ctrlC(pid: number): Promise<void> {
  process.kill(-pid, "SIGINT");
  await Bun.sleep(5);
  try {
    process.kill(-pid, "SIGINT");
  } catch {
    // the group is already gone
  }
}

test("Ctrl-C to `bun run serve` on the embedded database finishes an in-flight delivery (200 processed), exits 0, and leaves the database to other commands", async () => {
  const dataDir = await temporaryDataDir("webhook-inbox-signals-pg-");
  clusters.add(dataDir);
  const [pgPort, httpPort] = [await freePort(), await freePort()];
  const pgUrl = `postgres://postgres:postgres@127.0.0.1:${pgPort}/postgres`;
  const serve = spawnGroup("serve", [], {
    EMBEDDED_PG_DIR: dataDir,
    EMBEDDED_PG_PORT: String(pgPort),
    PORT: String(httpPort),
    HOST: "127.0.0.1",
    STRIPE_WEBHOOK_SECRET: SECRET,
  });
  const locker = postgres(pgUrl, { max: 1, onnotice: () => {} });
  const observer = postgres(pgUrl, { max: 1, onnotice: () => {} });
  try {
    const deadline = Date.now() + 60_000;
    while (!serve.out.stdout.includes("listening on")) {
      if (serve.child.exitCode !== null || Date.now() > deadline)
        throw new Error(`serve did not start: ${serve.out.stdout} ${serve.out.stderr}`);
      await Bun.sleep(50);
    }
    const url = `http://127.0.0.1:${httpPort}/webhooks/stripe`;
    const post = async (id: string, type: string, status: string) => {
      const request = await signedRequest(
        url,
        eventBody(id, type, invoice({ id: "in_signals_1", amount_paid: status === "paid" ? 2000 : 0, status })),
      );
      const response = await fetch(request);
      return { status: response.status, body: (await response.json()) as Record<string, unknown> };
    };
    expect(await post("evt_signals_created", "invoice.created", "draft")).toMatchObject({ status: 200, body: { outcome: "processed" } });

    // Hold the invoice row so the payment's delivery is still in flight when Ctrl-C arrives.
    let release = () => {};
    const held = new Promise<void>((resolve) => (release = resolve));
    let locked = false;
    const lock = locker.begin(async (tx) => {
      await tx`select 1 from invoices where id = 'in_signals_1' for update`;
      locked = true;
      await held;
    });
    while (!locked) await Bun.sleep(10);
    const paid = post("evt_signals_paid", "invoice.paid", "paid");
    for (
      let waited = 0;
      (await observer`select 1 from pg_stat_activity where datname = current_database() and wait_event_type = 'Lock'`).length === 0;
      waited += 10
    ) {
      if (waited > 10_000) throw new Error("the delivery never waited on the invoice lock");
      await Bun.sleep(10);
    }

    await ctrlC(serve.child.pid ?? 0);
    await Bun.sleep(300); // the database must still be up: it runs in its own session, out of the terminal's reach
    release();
    await lock;
    expect(await paid).toEqual({ status: 200, body: { outcome: "processed", event_id: "evt_signals_paid" } });
    const killer = setTimeout(() => serve.child.pid !== undefined && process.kill(-serve.child.pid, "SIGKILL"), 20_000);
    const code = await serve.exited;
    clearTimeout(killer);
    expect(code).toBe(0);
    // The development database outlives serve (bun run db:stop stops it) and holds what the 200 promised.
    const [booked] = await observer<{ ledger: number; processed: number }[]>`
      select (select count(*)::int from ledger_entries where invoice_id = 'in_signals_1') as ledger,
             (select count(*)::int from webhook_inbox where event_id = 'evt_signals_paid' and processed_at is not null) as processed
    `;
    expect(booked).toEqual({ ledger: 1, processed: 1 });
  } finally {
    await Promise.all([locker.end({ timeout: 1 }).catch(() => {}), observer.end({ timeout: 1 }).catch(() => {})]);
    await removeCluster(dataDir);
  }
}, 90_000);

test("`bun run serve` whose embedded database crashed still stops promptly on SIGTERM, exit 0", async () => {
  const dataDir = await temporaryDataDir("webhook-inbox-signals-pg-");
  clusters.add(dataDir);
  const [pgPort, httpPort] = [await freePort(), await freePort()];
  const serve = spawnGroup("serve", [], {
    EMBEDDED_PG_DIR: dataDir,
    EMBEDDED_PG_PORT: String(pgPort),
    PORT: String(httpPort),
    HOST: "127.0.0.1",
    STRIPE_WEBHOOK_SECRET: SECRET,
  });
  try {
    const deadline = Date.now() + 60_000;
    while (!serve.out.stdout.includes("listening on")) {
      if (serve.child.exitCode !== null || Date.now() > deadline)
        throw new Error(`serve did not start: ${serve.out.stdout} ${serve.out.stderr}`);
      await Bun.sleep(50);
    }
    // Immediate shutdown of the cluster serve started (SIGQUIT to its postmaster), as a crash would.
    process.kill(Number((await Bun.file(join(dataDir, "postmaster.pid")).text()).split("\n")[0]), "SIGQUIT");
    await Bun.sleep(500);
    process.kill(serve.child.pid ?? 0, "SIGTERM");
    const killer = setTimeout(() => serve.child.pid !== undefined && process.kill(-serve.child.pid, "SIGKILL"), 8_000);
    const code = await serve.exited;
    clearTimeout(killer);
    expect(code).toBe(0);
  } finally {
    await removeCluster(dataDir);
  }
}, 90_000);
