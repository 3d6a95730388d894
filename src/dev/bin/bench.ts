// Entry file: `bun run bench [--quick] [--runs N] [--seconds N] [--backlog N] [--only sections] [--levels 16,64] [--before-ref REF] [--out DIR]`. Measures
// the receiver and the worker against the physical ceiling (pgbench running the same SQL) and against
// peers (a naive Bun receiver doing the seed's SQL, graphile-worker) on this machine, side by side in one run, and writes <out>/latest.json and latest.md (default bench-results/).
// `--only layout` compares an older commit's code on its own schema with this tree's (sql/0027's storage change).
// pgbench: PGBENCH_BIN, else on PATH or Debian's /usr/lib/postgresql/<major>/bin. No timing is asserted
// by the test suite (test/dev/bench.test.ts: a quick run completes, DATABASE_URL's data is left alone).
import { spawn, spawnSync, type ChildProcess } from "node:child_process";
import { closeSync, mkdirSync, mkdtempSync, openSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { cpus, tmpdir, totalmem } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { prefillBacklog } from "../bench/backlog.ts";
import { extractBeforeTree } from "../bench/before-tree.ts";
import { NAIVE_INBOX_DDL } from "../bench/naive-inbox.ts";
import { capturedHandlerStatement, capturedScript, seedSyncScript } from "../bench/scripts.ts";
import { drainBacklog, loadTree, type TreeCode } from "../bench/drain.ts";
import { checkpoint, walBytesSince, walPosition } from "../bench/wal.ts";
import { connect, type Db } from "../../db/db.ts";
import { insertInbox } from "../../inbox/inbox.ts";
import { migrate } from "../../db/migrate.ts";
import { freePort, startEmbeddedPostgres, temporaryDataDir, type EmbeddedServer } from "../../runtime/embedded-postgres.ts";
import { loadMigrations } from "../../runtime/migrations-fs.ts";
import { createScratchDatabase } from "../scratch-database.ts";
import { onStopSignals } from "../../runtime/signals.ts";
import { graphileDrain } from "../bench/graphile-peer.ts";
import { naiveDrain, prefillNaiveBacklog } from "../bench/naive-worker.ts";
import { ensurePgbench, runPgbench } from "../bench/pgbench.ts";
import { hasWrk, wrkLoad } from "../bench/wrk.ts";
import { clockTicks, postgresCpuTicks, procStat } from "../chaos/cpu.ts";

const SECTIONS = ["ceiling", "sync", "async", "drain", "e2e", "duplicates", "otel", "layout"];
const USAGE = `Usage: bun run bench [--quick] [--runs N] [--seconds N] [--backlog N] [--only SECTIONS] [--levels LIST] [--before-ref REF] [--out DIR]
  measures the receiver and the worker against pgbench on a throwaway PostgreSQL and writes
  DIR/latest.json and DIR/latest.md (default bench-results/)
  --quick          1 run of 2 s at concurrency 16, a backlog of 5000
  --runs N         runs per measurement (default 3)
  --seconds N      seconds per run (default 5)
  --backlog N      events drained by the worker (default 10000)
  --only SECTIONS  comma-separated, from ${SECTIONS.join(", ")} (default all but otel and layout)
  --before-ref REF layout: the code before the state/payload split (default: the parent of the commit that
                   added sql/0027_inbox_state_apart.sql: one inbox table partitioned by creation time,
                   migrations 0001–0026), run from a git archive of REF on its own migrations, alternating
                   with this tree's (0001–0027): receive sync and async at --levels (default 16,64 here),
                   events/s, p99 and WAL bytes per event, and a worker drain of --backlog events at 4 slots
  --levels LIST    client counts of the receive sections, comma-separated (default 1,4,16,64; e2e: 16,64)
  --e2e-seconds N  seconds of sustained sending in the e2e section (default 60)
  --out DIR        where to write the results (default bench-results/)`;

/** Prints `problem` and the usage to stderr and exits 2 (before any database exists). */
function usage(problem: string): never {
  console.error(`bench: ${problem}\n\n${USAGE}`);
  process.exit(2);
}

const { values: o } = (() => {
  try {
    return parseArgs({
      options: {
        quick: { type: "boolean", default: false },
        runs: { type: "string" },
        seconds: { type: "string" },
        backlog: { type: "string" },
        only: { type: "string" },
        levels: { type: "string" },
        out: { type: "string" },
        "before-ref": { type: "string" },
        "e2e-seconds": { type: "string" },
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
/** `--name`'s value as a positive integer; exits 2 with the reason otherwise (before any database exists). */
function count(name: string, value: string | undefined, fallback: number): number {
  const n = Number(value ?? fallback);
  if (Number.isInteger(n) && n > 0) return n;
  usage(`--${name} must be a positive integer, got ${JSON.stringify(value)}`);
}
const runs = count("runs", o.runs, o.quick ? 1 : 3);
const seconds = count("seconds", o.seconds, o.quick ? 2 : 5);
const backlog = count("backlog", o.backlog, o.quick ? 5_000 : 10_000);
const e2eSeconds = count("e2e-seconds", o["e2e-seconds"], o.quick ? seconds : 60);
const levels = o.levels !== undefined ? o.levels.split(",").map((v) => count("levels", v, 1)) : o.quick ? [16] : [1, 4, 16, 64];
// `otel` (OpenTelemetry's no-op cost, docs/observability.md) and `layout` (receive and drain before and after
// sql/0027's storage, docs/scale.md) run only when named: each is a check of one change, not of the product's speed.
const sections = new Set((o.only ?? SECTIONS.filter((s) => s !== "otel" && s !== "layout").join(",")).split(","));
const unknown = [...sections].filter((section) => !SECTIONS.includes(section));
if (unknown.length) usage(`--only takes ${SECTIONS.join(", ")}; unknown: ${unknown.map((u) => `"${u}"`).join(", ")}`);
const SECRET = "whsec_bench_0123456789abcdefghijklmn";
const ROOT = fileURLToPath(new URL("../../../", import.meta.url));
const bin = (name: string) => join(ROOT, "src", "bin", `${name}.ts`);
const devBin = (name: string) => join(ROOT, "src", "dev", "bin", `${name}.ts`);
const say = (line: string) => console.log(line);

/**
 * A function emptying the inbox (both tables since sql/0027), the naive peer's inbox and the billing
 * tables of `db`, those of them that exist there (an older commit's schema has fewer): one TRUNCATE.
 */
async function truncator(db: Db): Promise<() => Promise<unknown>> {
  const [{ tables } = { tables: "" }] = await db<{ tables: string }[]>`
    select string_agg(quote_ident(t), ', ') as tables
      from unnest(array['webhook_inbox', 'webhook_inbox_payloads', 'naive_inbox', 'naive_outbox', 'invoices', 'ledger_entries', 'outbox']) t
     where to_regclass(t) is not null
  `;
  return () => db.unsafe(`truncate ${tables}`);
}

/** One side of the layout section: a tree's serve and code on its own scratch database. */
interface Variant {
  name: string;
  serve: string;
  url: string;
  db: Db;
  code: TreeCode;
  /** How many migrations its own sql/ has (its database must still have exactly these after the runs). */
  migrations: number;
  reset: () => Promise<unknown>;
}

// The database: a throwaway embedded PostgreSQL 18 with default durability, or a scratch database
// created on DATABASE_URL's server and dropped at the end. Never the database DATABASE_URL names: the
// bench truncates its tables between sections, which would destroy an inbox's dedup keys.
let embedded: EmbeddedServer | undefined;
let dataDir: string | undefined;
let url: string;
let serverUrl: string;
let dropScratch = async () => {};
const cleanups: (() => Promise<void> | void)[] = []; // the layout section's scratch databases and code copy
const children = new Set<ChildProcess>();
/** The Bun load generators running now (bunLoad). */
const loads = new Set<{ kill(signal?: number | NodeJS.Signals): void }>();
onStopSignals(
  (signal) => {
    console.error(`bench: ${signal}: stopping; dropping the scratch database`);
    void (async () => {
      for (const child of [...children, ...loads]) child.kill("SIGKILL");
      for (const cleanup of cleanups) await Promise.resolve(cleanup()).catch(() => {});
      await dropScratch().catch(() => {});
      await embedded?.stop().catch(() => {});
      if (dataDir) rmSync(dirname(dataDir), { recursive: true, force: true });
      process.exit(signal === "SIGINT" ? 130 : 143);
    })();
  },
  () => process.exit(1),
);
if (process.env.DATABASE_URL) {
  const scratch = await createScratchDatabase(process.env.DATABASE_URL, "webhook_inbox_bench");
  url = scratch.url;
  serverUrl = process.env.DATABASE_URL;
  dropScratch = scratch.drop;
} else {
  dataDir = await temporaryDataDir("webhook-inbox-bench-pg-");
  embedded = await startEmbeddedPostgres({ dir: dataDir, port: 0, flags: ["-c", "max_connections=300"] });
  url = embedded.url;
  serverUrl = embedded.url;
}
const db = connect(url, { max: 4, applicationName: "webhook-inbox bench" });
// Whatever fails, the scratch database is dropped and the embedded server stopped: a failed run must
// not leave a webhook_inbox_bench_* database behind on DATABASE_URL's server.
try {
  await migrate(db, loadMigrations());
  await db.unsafe(NAIVE_INBOX_DDL); // the naive peer's and the seed script's own one-table inbox
  const [{ version: pgVersion, sync: syncCommit } = { version: "?", sync: "?" }] = await db<
    { version: string; sync: string }[]
  >`select version(), current_setting('synchronous_commit') as sync`;
  const pgbench = sections.has("ceiling") ? ensurePgbench(say) : "";
  const machine = {
    cpu: cpus()[0]?.model ?? "?",
    cores: cpus().length,
    memory_gib: Math.round(totalmem() / 2 ** 30),
    bun: Bun.version,
    postgres: pgVersion.split(",")[0],
    synchronous_commit: syncCommit,
    pgbench: pgbench ? spawnSync(pgbench, ["--version"], { encoding: "utf8" }).stdout.trim() : "not used",
    date: new Date().toISOString(),
    runs,
    seconds_per_run: seconds,
  };
  say(`machine: ${JSON.stringify(machine)}`);

  /** Empties the inbox and billing tables, so one section's rows never become another's work. */
  const reset = await truncator(db);

  // CPU from /proc (clock ticks): the embedded server's (postmaster and children; NaN on DATABASE_URL's server).
  const postmaster = dataDir ? Number(readFileSync(join(dataDir, "postmaster.pid"), "utf8").split("\n")[0]) : undefined;
  const msPerTick = 1000 / clockTicks();
  const pgTicks = () => (postmaster === undefined ? Number.NaN : postgresCpuTicks(postmaster));
  const perEvent = (ticks: number, events: number) => (events > 0 ? (ticks * msPerTick) / events : Number.NaN);
  const cpuText = (x: number) => (Number.isNaN(x) ? "n/a" : x.toFixed(3));
  /** Runs `fn` (work done in this process: a drain) and returns its CPU per event, ms: this process's and PostgreSQL's. */
  async function cpuDuring<T>(events: number, fn: () => Promise<T>): Promise<{ value: T; selfMs: number; postgresMs: number }> {
    const [self0, pg0] = [process.cpuUsage(), pgTicks()];
    const value = await fn();
    const self = process.cpuUsage(self0);
    return { value, selfMs: (self.user + self.system) / 1000 / events, postgresMs: perEvent(pgTicks() - pg0, events) };
  }

  type Stat = { median: number; min: number; max: number };
  const stat = (xs: number[]): Stat => {
    const s = [...xs].sort((a, b) => a - b);
    return { median: s[Math.floor(s.length / 2)] ?? 0, min: s[0] ?? 0, max: s[s.length - 1] ?? 0 };
  };
  const results: Record<string, unknown> = { machine };
  const table: string[] = ["| measurement | concurrency | median | min–max | notes |", "|---|---|---|---|---|"];
  const row = (name: string, c: number | string, s: Stat, unit: string, notes = "") =>
    table.push(`| ${name} | ${c} | ${s.median.toFixed(0)} ${unit} | ${s.min.toFixed(0)}–${s.max.toFixed(0)} | ${notes} |`);

  // 1. The ceiling: pgbench running the seed's six statements, exactly our sync SQL, our async SQL, and the inbox insert alone.
  if (sections.has("ceiling")) {
    const scripts = {
      "pgbench: seed's 6-statement sync transaction": seedSyncScript(),
      "pgbench: our sync statement": await capturedScript(url, "sync"),
      "pgbench: our async statement": await capturedScript(url, "async"),
      "pgbench: inbox insert alone": await capturedScript(url, "insert"),
    };
    for (const [name, script] of Object.entries(scripts)) {
      await reset();
      for (const c of levels) {
        const tps = Array.from({ length: runs }, () => runPgbench(pgbench, url, script, c, seconds).tps);
        results[`${name} @${c}`] = stat(tps);
        row(name, c, stat(tps), "tx/s");
        say(`${name} @${c}: ${JSON.stringify(stat(tps))}`);
      }
    }
  }

  // 2–3. Receive end to end: signed requests from a separate load-generator process through `serve`.
  interface Load {
    rps: number;
    p50: number;
    p99: number;
    requests: number;
    /** Seconds the sender sent for. */
    seconds?: number;
    statuses: Record<string, number>;
  }
  function withServe<T>(env: Record<string, string>, fn: (base: string, pid: number) => Promise<T>): Promise<T> {
    return withReceiver(bin("serve"), env, fn);
  }
  async function withReceiver<T>(file: string, env: Record<string, string>, fn: (base: string, pid: number) => Promise<T>): Promise<T> {
    const port = await freePort();
    const child = spawn(process.execPath, [file], {
      env: { ...process.env, DATABASE_URL: url, STRIPE_WEBHOOK_SECRET: SECRET, PORT: String(port), ...env },
      stdio: ["ignore", "ignore", "inherit"],
    });
    children.add(child);
    child.once("exit", () => children.delete(child));
    const base = `http://127.0.0.1:${port}`;
    for (
      let i = 0;
      i < 100 &&
      !(await fetch(`${base}/readyz`).then(
        (r) => r.ok,
        () => false,
      ));
      i++
    )
      await Bun.sleep(100);
    try {
      return await fn(base, child.pid ?? 0);
    } finally {
      child.kill("SIGTERM");
      await new Promise((r) => child.once("exit", r));
    }
  }
  /** One load run from the Bun generator (bin/bench-load.ts: a fixed count of requests is possible); this process's event loop runs meanwhile. */
  async function bunLoad(options: Record<string, unknown>): Promise<Load> {
    const child = Bun.spawn([process.execPath, devBin("bench-load"), JSON.stringify({ secret: SECRET, ...options })], {
      stdout: "pipe",
      stderr: "pipe",
      stdin: "ignore",
    });
    loads.add(child); // a stop signal kills it too: it would go on sending with nobody to stop it
    const [stdout, stderr, status] = await Promise.all([
      new Response(child.stdout).text(),
      new Response(child.stderr).text(),
      child.exited,
    ]).finally(() => loads.delete(child));
    if (status !== 0) throw new Error(`load generator failed: ${stderr.slice(-1000)}`);
    return JSON.parse(stdout.trim().split("\n").pop() ?? "{}") as Load;
  }
  /** One load run of the receive sections: wrk when installed (a C sender: less CPU taken from the receiver), else the Bun generator. */
  const viaWrk = hasWrk();
  say(`load generator: ${viaWrk ? "wrk (Debian package)" : "bin/bench-load.ts (install Debian's wrk for a cheaper sender)"}`);
  async function load(options: {
    url: string;
    concurrency: number;
    durationMs: number;
    kind: "unique" | "duplicate";
    run: string;
  }): Promise<Load> {
    return viaWrk ? wrkLoad({ secret: SECRET, ...options }) : bunLoad(options);
  }
  function peakRssMiB(pid: number): number {
    const hwm = /VmHWM:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, "utf8"))?.[1];
    return Math.round(Number(hwm ?? 0) / 1024);
  }
  // Ours through `serve`, then the naive receiver peer (src/dev/bench/naive-peer.ts) under the same load.
  const receivers = [
    { name: "receive", file: bin("serve"), env: (mode: string) => ({ INBOX_MODE: mode }), what: "HTTP through serve" },
    {
      name: "naive peer",
      file: join(ROOT, "src", "dev", "bench", "naive-peer.ts"),
      env: (mode: string) => ({ PEER_MODE: mode }),
      what: "seed's SQL, 60-line Bun receiver",
    },
  ];
  // Ours and the peer run in turns (ours, peer, ours, peer, …), one receiver up at a time, each run on
  // empty tables after a warm-up of its own, so a drift of this shared machine's speed during a level
  // hits both alike (and an idle receiver's connections never weigh on the other's runs).
  const insertScript = sections.has("async") && pgbench ? await capturedScript(url, "insert") : "";
  for (const mode of ["sync", "async"] as const) {
    if (!sections.has(mode)) continue;
    for (const c of levels) {
      const [ours, peer] = receivers as [(typeof receivers)[number], (typeof receivers)[number]];
      const insertTps: number[] = [];
      const measured = [ours, peer].map(() => ({ loads: [] as Load[], rss: 0 }));
      for (let r = 0; r < runs; r++) {
        for (const [i, receiver] of [ours, peer].entries()) {
          await reset();
          const env = { ...receiver.env(mode), DB_POOL_MAX: String(Math.min(c, 64)) };
          await withReceiver(receiver.file, env, async (base, pid) => {
            // Warm-up (discarded): opens the pool's connections and the load generator's sockets.
            await load({
              url: `${base}/webhooks/stripe`,
              concurrency: c,
              durationMs: 1000,
              kind: "unique",
              run: `warm${mode}${c}r${r}${i}${Date.now()}`,
            });
            await reset();
            measured[i]!.loads.push(
              await load({
                url: `${base}/webhooks/stripe`,
                concurrency: c,
                durationMs: seconds * 1000,
                kind: "unique",
                run: `${mode}${c}r${r}${i}${Date.now()}`,
              }),
            );
            measured[i]!.rss = Math.max(measured[i]!.rss, peakRssMiB(pid));
          });
        }
        // Async's ceiling in the same turn: pgbench's one-row insert (with the ceiling section's pgbench).
        if (mode === "async" && pgbench) {
          await reset();
          insertTps.push(runPgbench(pgbench, url, insertScript, c, seconds).tps);
        }
      }
      for (const [i, receiver] of [ours, peer].entries()) {
        const m = measured[i]!;
        const name = `${receiver.name} ${mode} (${receiver.what})`;
        const rps = stat(m.loads.map((l) => l.rps));
        const p99 = stat(m.loads.map((l) => l.p99));
        const notes = `p50 ${stat(m.loads.map((l) => l.p50)).median.toFixed(1)} ms, p99 ${p99.median.toFixed(1)} ms (${p99.min.toFixed(1)}–${p99.max.toFixed(1)}), peak RSS ${m.rss} MiB, statuses ${JSON.stringify(m.loads[0]?.statuses)}`;
        results[`${name} @${c}`] = { ...rps, loads: m.loads, peak_rss_mib: m.rss };
        row(name, c, rps, "events/s", notes);
        say(`${name} @${c}: ${JSON.stringify(rps)} ${notes}`);
      }
      // Per run, ours ÷ the peer's run right after it: the ratio drift cannot bias.
      const ratios = measured[0]!.loads.map((l, r) => l.rps / (measured[1]!.loads[r]?.rps ?? Number.NaN));
      const ratio = stat(ratios);
      results[`receive ${mode} ÷ naive peer @${c}`] = ratio;
      table.push(
        `| receive ${mode} ÷ naive peer (paired runs) | ${c} | ${ratio.median.toFixed(2)}× | ${ratio.min.toFixed(2)}–${ratio.max.toFixed(2)} | |`,
      );
      say(`receive ${mode} ÷ naive peer @${c}: ${JSON.stringify(ratio)}`);
      if (insertTps.length > 0) {
        const vsInsert = stat(measured[0]!.loads.map((l, r) => l.rps / (insertTps[r] ?? Number.NaN)));
        results[`receive async ÷ pgbench insert @${c}`] = vsInsert;
        table.push(
          `| receive async ÷ pgbench one-row insert (paired runs) | ${c} | ${vsInsert.median.toFixed(2)}× | ${vsInsert.min.toFixed(2)}–${vsInsert.max.toFixed(2)} | |`,
        );
        say(`receive async ÷ pgbench insert @${c}: ${JSON.stringify(vsInsert)}`);
      }
    }
  }

  // OpenTelemetry's cost without an SDK: sync deliveries through `serve` with @opentelemetry/api loaded
  // (every span the API's no-op) and through `serve` with OTEL_SDK_DISABLED=true (no span made), in
  // turns, each run paired with the one after it (docs/observability.md).
  if (sections.has("otel")) {
    for (const c of levels) {
      const loads: Load[][] = [[], []];
      for (let r = 0; r < runs; r++) {
        for (const [i, extra] of ([{}, { OTEL_SDK_DISABLED: "true" }] as Record<string, string>[]).entries()) {
          await reset();
          await withServe({ INBOX_MODE: "sync", DB_POOL_MAX: String(Math.min(c, 64)), ...extra }, async (base) => {
            await load({
              url: `${base}/webhooks/stripe`,
              concurrency: c,
              durationMs: 1000,
              kind: "unique",
              run: `warmotel${c}r${r}${i}${Date.now()}`,
            });
            await reset();
            loads[i]!.push(
              await load({
                url: `${base}/webhooks/stripe`,
                concurrency: c,
                durationMs: seconds * 1000,
                kind: "unique",
                run: `otel${c}r${r}${i}${Date.now()}`,
              }),
            );
          });
        }
      }
      for (const [i, name] of ["receive sync, @opentelemetry/api loaded, no SDK", "receive sync, OTEL_SDK_DISABLED=true"].entries()) {
        const rps = stat(loads[i]!.map((l) => l.rps));
        results[`${name} @${c}`] = rps;
        row(name, c, rps, "events/s");
        say(`${name} @${c}: ${JSON.stringify(rps)}`);
      }
      const ratio = stat(loads[0]!.map((l, r) => l.rps / (loads[1]![r]?.rps ?? Number.NaN)));
      results[`receive sync, API without SDK ÷ no telemetry @${c}`] = ratio;
      table.push(
        `| receive sync, API without SDK ÷ no telemetry (paired runs) | ${c} | ${ratio.median.toFixed(2)}× | ${ratio.min.toFixed(2)}–${ratio.max.toFixed(2)} | |`,
      );
      say(`receive sync, API without SDK ÷ no telemetry @${c}: ${JSON.stringify(ratio)}`);
    }
  }

  /** `xs[r] ÷ ys[r]` per round r: a ratio a drift of the machine's speed between rounds cannot bias. */
  const paired = (xs: number[], ys: number[]) => stat(xs.map((x, r) => x / (ys[r] ?? Number.NaN)));
  const ratioRow = (name: string, c: number | string, s: Stat, notes = "") =>
    table.push(`| ${name} | ${c} | ${s.median.toFixed(2)}× | ${s.min.toFixed(2)}–${s.max.toFixed(2)} | ${notes} |`);

  // Receive and drain before and after sql/0027 (state rows apart from payloads). "Before" is the code of
  // --before-ref, taken with `git archive` into a temporary directory: its own serve and worker, on a
  // scratch database migrated by its own sql/ (0001–0026: one inbox table partitioned by creation time);
  // "after" is this tree on one migrated fully (0001–0027). Neither can run on the other's schema, and each
  // serve migrates its database at start, so each variant must run its own code. Same load, one
  // receiver up at a time, in turns whose order flips every round; each after run is divided by the
  // before run of its round. WAL bytes per event: pg_current_wal_lsn() before and after the measured run
  // (which starts after a checkpoint) over the events it recorded.
  if (sections.has("layout")) {
    const before = extractBeforeTree(ROOT, o["before-ref"], "sql/0027_inbox_state_apart.sql");
    cleanups.push(before.remove);
    const variants: Variant[] = [];
    for (const [name, root, prefix] of [
      [`before (${before.commit}, one table partitioned by creation time)`, before.dir, "webhook_inbox_bench_before"],
      ["after (this tree, state apart from payloads)", ROOT, "webhook_inbox_bench_after"],
    ] as const) {
      const scratch = await createScratchDatabase(serverUrl, prefix);
      const vdb = connect(scratch.url, { max: 2, applicationName: "webhook-inbox bench" });
      cleanups.push(async () => {
        await vdb.end({ timeout: 5 });
        await scratch.drop();
      });
      const migrations = loadMigrations(join(root, "sql"));
      const applied = await migrate(vdb, migrations);
      say(`layout: ${name}: ${applied.length} migrations, the last ${applied.at(-1)}`);
      const code = await loadTree(root);
      variants.push({
        name,
        serve: join(root, "src", "bin", "serve.ts"),
        url: scratch.url,
        db: vdb,
        code,
        migrations: migrations.length,
        reset: await truncator(vdb),
      });
    }
    const [beforeV, afterV] = variants as [Variant, Variant];
    const order = (r: number) => (r % 2 === 0 ? [beforeV, afterV] : [afterV, beforeV]);
    const wal = { checkpointed: true };
    const layoutLevels = o.levels !== undefined ? levels : [16, 64];
    for (const mode of ["sync", "async"] as const) {
      for (const c of layoutLevels) {
        const measured = new Map(variants.map((v) => [v, { loads: [] as Load[], walPerEvent: [] as number[] }]));
        for (let r = 0; r < runs; r++) {
          for (const v of order(r)) {
            await v.reset();
            await withReceiver(v.serve, { DATABASE_URL: v.url, INBOX_MODE: mode, DB_POOL_MAX: String(Math.min(c, 64)) }, async (base) => {
              await load({
                url: `${base}/webhooks/stripe`,
                concurrency: c,
                durationMs: 1000,
                kind: "unique",
                run: `warmlayout${mode}${c}r${r}${Date.now()}`,
              });
              await v.reset();
              wal.checkpointed &&= await checkpoint(v.db);
              const lsn = await walPosition(v.db);
              const l = await load({
                url: `${base}/webhooks/stripe`,
                concurrency: c,
                durationMs: seconds * 1000,
                kind: "unique",
                run: `layout${mode}${c}r${r}${Date.now()}`,
              });
              const bytes = await walBytesSince(v.db, lsn);
              const [{ n } = { n: 0 }] = await v.db<{ n: number }[]>`select count(*)::int as n from webhook_inbox`;
              measured.get(v)!.loads.push(l);
              measured.get(v)!.walPerEvent.push(n > 0 ? bytes / n : Number.NaN);
            });
          }
        }
        for (const v of variants) {
          const m = measured.get(v)!;
          const rps = stat(m.loads.map((l) => l.rps));
          const p99 = stat(m.loads.map((l) => l.p99));
          const walPerEvent = stat(m.walPerEvent);
          const notes = `p99 ${p99.median.toFixed(1)} ms (${p99.min.toFixed(1)}–${p99.max.toFixed(1)}), WAL ${walPerEvent.median.toFixed(0)} B/event (${walPerEvent.min.toFixed(0)}–${walPerEvent.max.toFixed(0)}), statuses ${JSON.stringify(m.loads[0]?.statuses)}`;
          results[`receive ${mode}, ${v.name} @${c}`] = { ...rps, p99, wal_bytes_per_event: walPerEvent, loads: m.loads };
          row(`receive ${mode}, ${v.name}`, c, rps, "events/s", notes);
          say(`receive ${mode}, ${v.name} @${c}: ${JSON.stringify(rps)} ${notes}`);
        }
        const [b, a] = [measured.get(beforeV)!, measured.get(afterV)!];
        const ratio = paired(
          a.loads.map((l) => l.rps),
          b.loads.map((l) => l.rps),
        );
        const walRatio = paired(a.walPerEvent, b.walPerEvent);
        results[`receive ${mode}, after ÷ before @${c}`] = ratio;
        results[`receive ${mode}, WAL per event after ÷ before @${c}`] = walRatio;
        ratioRow(`receive ${mode}, after ÷ before (paired runs, alternating)`, c, ratio, "speed guard: ≥ 0.95×");
        ratioRow(`receive ${mode}, WAL bytes per event, after ÷ before (paired runs)`, c, walRatio);
        say(`receive ${mode}, after ÷ before @${c}: ${JSON.stringify(ratio)}; WAL per event after ÷ before: ${JSON.stringify(walRatio)}`);
      }
    }
    // The worker drain: the same backlog, recorded by each variant's own insertInbox on its own schema, drained by its own worker.
    const slots = 4;
    const drained = new Map(variants.map((v) => [v, { rates: [] as number[], walPerEvent: [] as number[] }]));
    for (let r = 0; r < runs; r++) {
      for (const v of order(r)) {
        await v.reset();
        await prefillBacklog(v.db, v.code.insertInbox, `L${variants.indexOf(v)}r${r}${Date.now()}`, backlog);
        const d = await drainBacklog(v.code, v.url, v.db, slots, backlog);
        wal.checkpointed &&= d.checkpointed;
        drained.get(v)!.rates.push(backlog / d.seconds);
        drained.get(v)!.walPerEvent.push(d.walBytes / backlog);
      }
    }
    for (const v of variants) {
      const d = drained.get(v)!;
      const rate = stat(d.rates);
      const walPerEvent = stat(d.walPerEvent);
      const notes = `backlog ${backlog}, WAL ${walPerEvent.median.toFixed(0)} B/event drained (${walPerEvent.min.toFixed(0)}–${walPerEvent.max.toFixed(0)}): claim + apply + settle`;
      results[`worker drain, ${v.name} @${slots}`] = { ...rate, wal_bytes_per_event: walPerEvent };
      row(`worker drain, ${v.name}`, slots, rate, "events/s", notes);
      say(`worker drain, ${v.name} @${slots}: ${JSON.stringify(rate)} ${notes}`);
    }
    const [b, a] = [drained.get(beforeV)!, drained.get(afterV)!];
    const ratio = paired(a.rates, b.rates);
    const walRatio = paired(a.walPerEvent, b.walPerEvent);
    results[`worker drain, after ÷ before @${slots}`] = ratio;
    results[`worker drain, WAL per event after ÷ before @${slots}`] = walRatio;
    ratioRow("worker drain, after ÷ before (paired runs, alternating)", slots, ratio);
    ratioRow("worker drain, WAL bytes per event, after ÷ before (paired runs)", slots, walRatio);
    say(`worker drain, after ÷ before @${slots}: ${JSON.stringify(ratio)}; WAL per event after ÷ before: ${JSON.stringify(walRatio)}`);
    // Each database is still at its own tree's migrations: no variant's receiver or worker was another's code.
    for (const v of variants) {
      const [{ n } = { n: 0 }] = await v.db<{ n: number }[]>`select count(*)::int as n from schema_migrations`;
      if (n !== v.migrations)
        throw new Error(`layout: ${v.name}: its database has ${n} migrations after the runs, not its own ${v.migrations}`);
      say(`layout: ${v.name}: still ${n} migrations after the runs`);
    }
    if (!wal.checkpointed)
      say("layout: checkpoint refused (the role needs pg_checkpoint): WAL figures depend on when the server last checkpointed");
    results["layout"] = { before: beforeV.name, after: afterV.name, checkpointed: wal.checkpointed };
  }

  // 4. Worker drain: a prefilled backlog processed by 1, 4 and 16 worker slots.
  if (sections.has("drain")) {
    const own = await loadTree(ROOT);
    for (const w of o.quick ? [4] : [1, 4, 16]) {
      const rates: number[] = [];
      const walPerEvent: number[] = [];
      const cpu = { worker: [] as number[], postgres: [] as number[] };
      for (let r = 0; r < runs; r++) {
        await reset();
        await prefillBacklog(db, insertInbox, `d${w}r${r}${Date.now()}`, backlog);
        const { value: d, selfMs, postgresMs } = await cpuDuring(backlog, () => drainBacklog(own, url, db, w, backlog));
        rates.push(backlog / d.seconds);
        walPerEvent.push(d.walBytes / backlog);
        cpu.worker.push(selfMs);
        cpu.postgres.push(postgresMs);
      }
      const wal = stat(walPerEvent);
      const cpuNote = (c: { worker: number[]; postgres: number[] }) =>
        `CPU ms/event: worker ${cpuText(stat(c.worker).median)}, PostgreSQL ${cpuText(stat(c.postgres).median)}`;
      results[`worker drain @${w}`] = {
        ...stat(rates),
        wal_bytes_per_event: wal,
        worker_cpu_ms_per_event: stat(cpu.worker),
        postgres_cpu_ms_per_event: stat(cpu.postgres),
      };
      row(
        "worker drain (ours)",
        w,
        stat(rates),
        "events/s",
        `backlog ${backlog}, WAL ${wal.median.toFixed(0)} B/event drained; ${cpuNote(cpu)}`,
      );
      say(`worker drain @${w}: ${JSON.stringify(stat(rates))}, WAL ${wal.median.toFixed(0)} B/event, ${cpuNote(cpu)}`);
      // The naive worker: the seed's two transactions per event (claim, then apply) on its own one-table inbox.
      const naive: number[] = [];
      const naiveCpu = { worker: [] as number[], postgres: [] as number[] };
      for (let r = 0; r < runs; r++) {
        await reset();
        await prefillNaiveBacklog(db, `n${w}r${r}${Date.now()}`, backlog);
        await db`analyze naive_inbox`;
        await checkpoint(db);
        const { value: d, selfMs, postgresMs } = await cpuDuring(backlog, () => naiveDrain(url, w));
        if (d.processed !== backlog) throw new Error(`naive worker drain: ${d.processed} of ${backlog} rows processed`);
        naive.push(backlog / d.seconds);
        naiveCpu.worker.push(selfMs);
        naiveCpu.postgres.push(postgresMs);
      }
      results[`naive worker drain @${w}`] = stat(naive);
      row(
        "naive worker drain (seed §6: claim, then apply)",
        w,
        stat(naive),
        "events/s",
        `backlog ${backlog}, two transactions per event; ${cpuNote(naiveCpu)}`,
      );
      say(`naive worker drain @${w}: ${JSON.stringify(stat(naive))}`);
      const ours = stat(rates).median / stat(naive).median;
      results[`worker drain ÷ naive worker @${w}`] = { median: ours, min: ours, max: ours };
      ratioRow("worker drain ÷ naive worker (medians)", w, { median: ours, min: ours, max: ours });
      say(`worker drain ÷ naive worker @${w}: ${ours.toFixed(2)}×`);
      // The peer: graphile-worker doing the same billing statement per job, plain and with its batching.
      const work = await capturedHandlerStatement(url);
      for (const batched of [false, true]) {
        await reset();
        const peer = Array.from({ length: runs }, () => 0);
        for (let r = 0; r < runs; r++) peer[r] = await graphileDrain(db, url, work, backlog, w, batched);
        const name = `graphile-worker drain${batched ? " (batched: local queue + batched completion)" : ""}`;
        results[`${name} @${w}`] = stat(peer);
        row(name, w, stat(peer), "jobs/s", `backlog ${backlog}, same billing statement per job`);
        say(`${name} @${w}: ${JSON.stringify(stat(peer))}`);
      }
    }
  }

  // End to end (async mode): `serve` and one `bun run worker` (its defaults) together under a sustained
  // sender for --e2e-seconds, against `serve` alone under the same sender in the same turn. The worker
  // keeps up when the backlog stays bounded: processed per second over the window ÷ received per
  // second alone. CPU per event of each process (from /proc, clock ticks) and WAL bytes per event.
  if (sections.has("e2e")) {
    const ownTicks = (pid: number) => procStat(pid)?.own ?? Number.NaN;
    const open = async () =>
      (await db<{ n: number }[]>`select count(*)::int as n from webhook_inbox where processed_at is null`)[0]?.n ?? 0;
    const settled = async () =>
      (await db<{ n: number }[]>`select count(*)::int as n from webhook_inbox where processed_at is not null`)[0]?.n ?? 0;
    /** Runs `fn` with a `bun run worker` (its default settings, LISTEN on) up and started; stops it with SIGTERM. */
    async function withWorker<T>(fn: (pid: number) => Promise<T>): Promise<T> {
      // Its log (a line per row) to a file: a pipe this process stops reading would stall the worker.
      const logDir = mkdtempSync(join(tmpdir(), "webhook-inbox-bench-worker-"));
      const logFile = join(logDir, "worker.log");
      const fd = openSync(logFile, "w");
      const child = spawn(process.execPath, [bin("worker")], {
        env: { ...process.env, DATABASE_URL: url },
        stdio: ["ignore", fd, "inherit"],
      });
      closeSync(fd);
      children.add(child);
      child.once("exit", () => children.delete(child));
      for (let i = 0; !readFileSync(logFile, "utf8").includes('"worker":"started"'); i++) {
        if (child.exitCode !== null || i > 300)
          throw new Error(`e2e: the worker did not start: ${readFileSync(logFile, "utf8").slice(-500)}`);
        await Bun.sleep(100);
      }
      try {
        return await fn(child.pid ?? 0);
      } finally {
        if (child.exitCode === null) {
          child.kill("SIGTERM");
          await new Promise((r) => child.once("exit", r));
        }
        rmSync(logDir, { recursive: true, force: true });
      }
    }
    for (const c of o.levels !== undefined ? levels : o.quick ? [16] : [16, 64]) {
      const serveEnv = { INBOX_MODE: "async", DB_POOL_MAX: String(Math.min(c, 64)) };
      const warm = (base: string, tag: string) =>
        load({ url: `${base}/webhooks/stripe`, concurrency: c, durationMs: 1000, kind: "unique", run: `warm${tag}${c}${Date.now()}` });
      await reset();
      const alone = await withServe(serveEnv, async (base, pid) => {
        await warm(base, "e2ealone");
        await reset();
        const [serve0, pg0, lsn] = [ownTicks(pid), pgTicks(), await walPosition(db)];
        const l = await load({
          url: `${base}/webhooks/stripe`,
          concurrency: c,
          durationMs: e2eSeconds * 1000,
          kind: "unique",
          run: `e2ea${c}${Date.now()}`,
        });
        const events = l.statuses["200"] ?? l.statuses["2xx"] ?? 0;
        return {
          rps: l.rps,
          serve_cpu_ms_per_event: perEvent(ownTicks(pid) - serve0, events),
          postgres_cpu_ms_per_event: perEvent(pgTicks() - pg0, events),
          wal_bytes_per_event: (await walBytesSince(db, lsn)) / Math.max(1, events),
        };
      });
      await reset();
      const together = await withWorker((workerPid) =>
        withServe(serveEnv, async (base, pid) => {
          await warm(base, "e2e");
          for (let i = 0; i < 300 && (await open()) > 0; i++) await Bun.sleep(100); // the warm-up drained
          await reset();
          const [serve0, worker0, pg0, lsn] = [ownTicks(pid), ownTicks(workerPid), pgTicks(), await walPosition(db)];
          const t0 = performance.now();
          const samples: { s: number; backlog: number }[] = [];
          let sampling = true;
          const sampler = (async () => {
            while (sampling) {
              await Bun.sleep(Math.min(5_000, (e2eSeconds * 1000) / 4));
              if (sampling) samples.push({ s: Math.round((performance.now() - t0) / 1000), backlog: await open() });
            }
          })();
          const l = await load({
            url: `${base}/webhooks/stripe`,
            concurrency: c,
            durationMs: e2eSeconds * 1000,
            kind: "unique",
            run: `e2e${c}${Date.now()}`,
          });
          sampling = false;
          await sampler;
          const seconds = (performance.now() - t0) / 1000;
          const [processed, backlogAtEnd] = [await settled(), await open()];
          const [serveTicks, workerTicks, pgUsed] = [ownTicks(pid) - serve0, ownTicks(workerPid) - worker0, pgTicks() - pg0];
          const wal = await walBytesSince(db, lsn);
          const drainStart = performance.now();
          for (let i = 0; i < 1200 && (await open()) > 0; i++) await Bun.sleep(100);
          const events = l.statuses["200"] ?? l.statuses["2xx"] ?? 0;
          return {
            received_rps: l.rps,
            // Over the sender's own seconds (its requests are signed before its clock starts: nothing arrives before).
            processed_rps: processed / (l.seconds ?? seconds),
            backlog_at_end: backlogAtEnd,
            backlog: samples,
            drain_after_s: (performance.now() - drainStart) / 1000,
            serve_cpu_ms_per_event: perEvent(serveTicks, events),
            worker_cpu_ms_per_event: perEvent(workerTicks, processed),
            postgres_cpu_ms_per_event: perEvent(pgUsed, events),
            wal_bytes_per_event: wal / Math.max(1, events),
          };
        }),
      );
      const ratio = together.processed_rps / alone.rps;
      results[`receive async alone (e2e) @${c}`] = { median: alone.rps, ...alone };
      results[`end to end async, processed @${c}`] = { median: together.processed_rps, ...together };
      results[`end to end ÷ receive alone @${c}`] = { median: ratio, min: ratio, max: ratio };
      row(
        "receive async alone (e2e)",
        c,
        stat([alone.rps]),
        "events/s",
        `${e2eSeconds} s; CPU ms/event: serve ${cpuText(alone.serve_cpu_ms_per_event)}, PostgreSQL ${cpuText(alone.postgres_cpu_ms_per_event)}; WAL ${alone.wal_bytes_per_event.toFixed(0)} B/event`,
      );
      row(
        "end to end async: serve + worker, processed",
        c,
        stat([together.processed_rps]),
        "events/s",
        `received ${together.received_rps.toFixed(0)}/s; backlog ${together.backlog.map((b) => `${b.s}s:${b.backlog}`).join(" ")}, ${together.backlog_at_end} at the end, drained ${together.drain_after_s.toFixed(1)} s later; CPU ms/event: serve ${cpuText(together.serve_cpu_ms_per_event)}, worker ${cpuText(together.worker_cpu_ms_per_event)}, PostgreSQL ${cpuText(together.postgres_cpu_ms_per_event)}; WAL ${together.wal_bytes_per_event.toFixed(0)} B/event`,
      );
      ratioRow("end to end processed ÷ receive async alone", c, { median: ratio, min: ratio, max: ratio });
      say(`e2e @${c}: alone ${JSON.stringify(alone)}; together ${JSON.stringify(together)}; ratio ${ratio.toFixed(2)}`);
    }
  }

  // 5. Duplicate storm: one event 1,000 times at concurrency 64.
  if (sections.has("duplicates")) {
    await reset();
    const run = `dup${Date.now()}`;
    const storm = await withServe({ INBOX_MODE: "sync", DB_POOL_MAX: "64" }, async (base) => {
      await bunLoad({ url: `${base}/webhooks/stripe`, concurrency: 64, durationMs: 1000, kind: "unique", run: `warm${run}` });
      return bunLoad({ url: `${base}/webhooks/stripe`, concurrency: 64, durationMs: 60_000, requests: 1000, kind: "duplicate", run });
    });
    const [booked] = await db<{ n: number }[]>`select count(*)::int as n from ledger_entries where invoice_id = ${`in_bench_${run}_0`}`;
    results["duplicate storm"] = { ...storm, ledger_rows: booked?.n };
    table.push(
      `| duplicate storm: 1 event × 1000 | 64 | p99 ${storm.p99.toFixed(1)} ms | p50 ${storm.p50.toFixed(1)} ms | statuses ${JSON.stringify(storm.statuses)}, ledger rows ${booked?.n} |`,
    );
    say(`duplicate storm: ${JSON.stringify(storm)} ledger rows ${booked?.n}`);
  }

  const outDir = o.out ?? join(ROOT, "bench-results");
  mkdirSync(outDir, { recursive: true });
  writeFileSync(join(outDir, "latest.json"), `${JSON.stringify(results, null, 2)}\n`);
  const markdown = `Machine: ${machine.cores} × ${machine.cpu}, ${machine.memory_gib} GiB; Bun ${machine.bun}; ${machine.postgres} (synchronous_commit=${machine.synchronous_commit}); ${machine.pgbench}; ${machine.date}. Medians of ${runs} run(s) of ${seconds} s.\n\n${table.join("\n")}\n`;
  writeFileSync(join(outDir, "latest.md"), markdown);
  say(`\n${markdown}\nwritten: ${join(outDir, "latest.json")}, ${join(outDir, "latest.md")}`);
} catch (err) {
  console.error(`bench: ${err instanceof Error ? err.message : String(err)}`);
  process.exitCode = 1;
}
await db.end({ timeout: 5 }).catch(() => {});
for (const cleanup of cleanups) await Promise.resolve(cleanup()).catch(() => {});
await dropScratch();
await embedded?.stop();
if (dataDir) rmSync(dirname(dataDir), { recursive: true, force: true });
process.exit(process.exitCode ?? 0);
