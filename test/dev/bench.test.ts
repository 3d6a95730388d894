// `bun run bench`: with DATABASE_URL set it measures in a scratch database it creates and drops, and
// leaves the database DATABASE_URL names untouched (it truncates tables between sections); pgbench
// accepts its scripts; a quick run completes every section. No timing is asserted here; the figures
// live in docs/performance.md.
import { afterAll, expect, test } from "bun:test";
import { spawnSync } from "node:child_process";
import { existsSync } from "node:fs";
import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { NAIVE_INBOX_DDL } from "../../src/dev/bench/naive-inbox.ts";
import { loadMigrations } from "../../src/runtime/migrations-fs.ts";
import { capturedScript, seedSyncScript } from "../../src/dev/bench/scripts.ts";
import { billingHandlers } from "../../src/handlers/billing.ts";
import { receiveSync } from "../../src/receiver/receive.ts";
import { pgbenchCandidates } from "../../src/dev/bench/pgbench.ts";
import { count, eventBody, freshDatabase, invoice, verified } from "../support/helpers.ts";
import { binaryMissing, binaryRequired, findBinary } from "../support/support-binary.ts";

const fresh = await freshDatabase();
const db = fresh.db;
afterAll(() => fresh.drop());

test("`bun run bench --only duplicates` with DATABASE_URL leaves that database's rows alone and drops its scratch database", async () => {
  const body = eventBody("evt_bench_keep", "invoice.paid", invoice({ id: "in_bench_keep", amount_paid: 2000, status: "paid" }));
  expect(await receiveSync(db, { provider: "stripe", endpoint: "billing", handlers: billingHandlers }, verified(body))).toBe("processed");
  const out = await mkdtemp(join(tmpdir(), "webhook-inbox-bench-out-"));
  try {
    const child = Bun.spawn([process.execPath, "src/dev/bin/bench.ts", "--quick", "--only", "duplicates", "--out", out], {
      cwd: join(import.meta.dir, "..", ".."),
      env: { ...process.env, DATABASE_URL: fresh.url },
      stdout: "pipe",
      stderr: "pipe",
      timeout: 200_000,
    });
    const [stdout, stderr, code] = await Promise.all([new Response(child.stdout).text(), new Response(child.stderr).text(), child.exited]);
    expect({ code, stderr: code === 0 ? "" : stderr.slice(-2000) }).toEqual({ code: 0, stderr: "" });
    expect(stdout).toContain("duplicate storm:");
    expect(JSON.parse(await readFile(join(out, "latest.json"), "utf8"))).toHaveProperty("duplicate storm");
    // The user's rows are all still there: the bench wrote into its own database.
    expect(await count(db, "webhook_inbox")).toBe(1);
    expect(await count(db, "ledger_entries", "invoice_id = 'in_bench_keep'")).toBe(1);
    expect(await count(db, "outbox")).toBe(1);
    const scratch = await db<{ datname: string }[]>`select datname from pg_database where datname like 'webhook_inbox_bench%'`;
    expect([...scratch]).toEqual([]);
  } finally {
    await rm(out, { recursive: true, force: true });
  }
}, 220_000);

// The before side is the parent of the commit that added sql/0027_inbox_state_apart.sql, read from git
// history: a shallow clone or an exported tree has none, and the test is one named skip there.
const layoutHistory =
  Bun.spawnSync(["git", "log", "--diff-filter=A", "--format=%H", "--", "sql/0027_inbox_state_apart.sql"], {
    cwd: join(import.meta.dir, "..", ".."),
  })
    .stdout.toString()
    .trim() !== "";
if (!layoutHistory)
  console.log("skip: bench --only layout test: no git history holding the commit that added sql/0027_inbox_state_apart.sql");
(layoutHistory ? test : test.skip)(
  "`bun run bench --only layout` serves and drains with the code before sql/0027 on its own schema and with this tree on 0027, in turns, prints ratios and WAL per event, and drops both scratch databases",
  async () => {
    const out = await mkdtemp(join(tmpdir(), "webhook-inbox-bench-out-"));
    try {
      const child = Bun.spawn(
        [
          process.execPath,
          "src/dev/bin/bench.ts",
          "--only",
          "layout",
          "--runs",
          "1",
          "--seconds",
          "1",
          "--levels",
          "16",
          "--backlog",
          "300",
          "--out",
          out,
        ],
        {
          cwd: join(import.meta.dir, "..", ".."),
          env: { ...process.env, DATABASE_URL: fresh.url },
          stdout: "pipe",
          stderr: "pipe",
          timeout: 300_000,
        },
      );
      const [stdout, stderr, code] = await Promise.all([
        new Response(child.stdout).text(),
        new Response(child.stderr).text(),
        child.exited,
      ]);
      expect({ code, stderr: code === 0 ? "" : stderr.slice(-2000) }).toEqual({ code: 0, stderr: "" });
      expect(stdout).toMatch(
        /layout: before \(\w+, one table partitioned by creation time\): 26 migrations, the last 0026_inbox_partitions\.sql/,
      );
      const ours = loadMigrations();
      expect(stdout).toContain(
        `layout: after (this tree, state apart from payloads): ${ours.length} migrations, the last ${ours.at(-1)?.name}`,
      );
      // Each side was served and drained by its own tree: neither database was migrated by the other's code.
      expect(stdout).toMatch(/layout: before \(\w+, one table partitioned by creation time\): still 26 migrations after the runs/);
      expect(stdout).toContain(`layout: after (this tree, state apart from payloads): still ${ours.length} migrations after the runs`);
      type Figure = {
        median: number;
        loads?: { requests: number; statuses: Record<string, number> }[];
        wal_bytes_per_event?: { median: number };
      };
      const results = JSON.parse(await readFile(join(out, "latest.json"), "utf8")) as Record<string, Figure>;
      const keyOf = (prefix: string) => Object.keys(results).find((k) => k.startsWith(prefix)) ?? "";
      for (const mode of ["sync", "async"]) {
        expect(results[`receive ${mode}, after ÷ before @16`]?.median).toBeGreaterThan(0);
        expect(results[`receive ${mode}, WAL per event after ÷ before @16`]?.median).toBeGreaterThan(0);
        for (const side of ["before", "after"]) {
          const figure = results[keyOf(`receive ${mode}, ${side} (`)];
          const statuses = figure?.loads?.[0]?.statuses ?? {};
          // Every delivery was recorded (2xx) by both receivers: each ran against a schema it understands.
          // wrk counts statuses by class ("2xx"), bin/bench-load.ts by code ("200").
          expect({
            side,
            recorded: Object.entries(statuses).some(([s, n]) => s.startsWith("2") && n > 0),
            other: Object.keys(statuses).filter((s) => !s.startsWith("2")),
            wal: (figure?.wal_bytes_per_event?.median ?? 0) > 0,
          }).toEqual({ side, recorded: true, other: [], wal: true });
        }
      }
      for (const side of ["before", "after"]) {
        const drain = results[keyOf(`worker drain, ${side} (`)];
        expect({ side, rate: (drain?.median ?? 0) > 0, wal: (drain?.wal_bytes_per_event?.median ?? 0) > 0 }).toEqual({
          side,
          rate: true,
          wal: true,
        });
      }
      expect(results["worker drain, after ÷ before @4"]?.median).toBeGreaterThan(0);
      const scratch = await db<{ datname: string }[]>`select datname from pg_database where datname like 'webhook_inbox_bench%'`;
      expect([...scratch]).toEqual([]);
    } finally {
      await rm(out, { recursive: true, force: true });
    }
  },
  330_000,
);

test("`bun run bench` that fails mid-run (PGBENCH_BIN runs nothing) exits 1 naming the cause and still drops its scratch database", async () => {
  const child = Bun.spawn(
    [process.execPath, "src/dev/bin/bench.ts", "--quick", "--only", "ceiling", "--out", join(tmpdir(), "webhook-inbox-bench-unused")],
    {
      cwd: join(import.meta.dir, "..", ".."),
      env: { ...process.env, DATABASE_URL: fresh.url, PGBENCH_BIN: "/nonexistent/pgbench" },
      stdout: "pipe",
      stderr: "pipe",
      timeout: 60_000,
    },
  );
  const [, stderr, code] = await Promise.all([new Response(child.stdout).text(), new Response(child.stderr).text(), child.exited]);
  expect({ code, named: stderr.includes("PGBENCH_BIN=/nonexistent/pgbench does not run") }).toEqual({ code: 1, named: true });
  const scratch = await db<{ datname: string }[]>`select datname from pg_database where datname like 'webhook_inbox_bench%'`;
  expect([...scratch]).toEqual([]);
}, 60_000);

// The pgbench ceiling: pgbench must be on the machine. Where it is absent these tests skip with the
// reason, except under .ci/run (REQUIRE_PGBENCH=1) or CI=true, where its absence fails the file.
const PGBENCH_HINT = "apt-get install postgresql-client (on Debian 12 pgbench ships in postgresql-15)";
const pgbenchMissing = binaryMissing("pgbench", PGBENCH_HINT, process.env, pgbenchCandidates());
if (pgbenchMissing && binaryRequired("pgbench")) {
  test("pgbench is required here (CI or REQUIRE_PGBENCH=1)", () => {
    throw new Error(pgbenchMissing);
  });
} else if (pgbenchMissing) {
  console.warn(`bench.test.ts: skipping the pgbench tests: ${pgbenchMissing}`);
}
const pgbench = findBinary("pgbench", process.env, pgbenchCandidates()) ?? "pgbench";

test("`binaryMissing()` names pgbench and its install command when PGBENCH_BIN points at no file; CI or REQUIRE_PGBENCH=1 make it required", () => {
  const env = { PATH: process.env.PATH, PGBENCH_BIN: "/nonexistent/pgbench" };
  expect(findBinary("pgbench", env, ["/usr/bin/pgbench"])).toBeUndefined();
  expect(binaryMissing("pgbench", PGBENCH_HINT, env)).toBe(
    `pgbench is not installed (PGBENCH_BIN=/nonexistent/pgbench does not run): \`${PGBENCH_HINT}\` runs these tests`,
  );
  expect(binaryRequired("pgbench", { ...env, REQUIRE_PGBENCH: "1" })).toBe(true);
  expect(binaryRequired("pgbench", { ...env, CI: "true" })).toBe(true);
  expect(binaryRequired("pgbench", env)).toBe(false);
});

test.skipIf(!!pgbenchMissing)(
  "the bench's four pgbench scripts each run under `pgbench -M prepared` and do their statement's work",
  async () => {
    const own = await freshDatabase();
    const dir = await mkdtemp(join(tmpdir(), "webhook-inbox-pgbench-test-"));
    try {
      const scripts = {
        seed: seedSyncScript(),
        sync: await capturedScript(own.url, "sync"),
        async: await capturedScript(own.url, "async"),
        inbox: await capturedScript(own.url, "insert"),
      };
      await own.db.unsafe(NAIVE_INBOX_DDL); // the seed script's one-table inbox, as the bench creates it
      for (const [name, script] of Object.entries(scripts)) {
        await writeFile(join(dir, `${name}.sql`), script);
        const out = spawnSync(pgbench, ["-n", "-M", "prepared", "-c", "1", "-t", "1", "-f", join(dir, `${name}.sql`), own.url], {
          encoding: "utf8",
        });
        expect({ name, status: out.status, stderr: out.status === 0 ? "" : out.stderr.slice(-1500) }).toEqual({
          name,
          status: 0,
          stderr: "",
        });
      }
      // Ours: each state row with its payload row (sync settled, async and the insert alone pending).
      const rows = await own.db<{ endpoint: string; processed: number; pending: number; payloads: number }[]>`
      select s.endpoint, count(*) filter (where s.processed_at is not null)::int as processed,
             count(*) filter (where s.processed_at is null)::int as pending,
             count(p.payload)::int as payloads
        from webhook_inbox s
        left join webhook_inbox_payloads p using (provider, endpoint, event_id, received_at)
       group by s.endpoint
       order by s.endpoint
    `;
      expect([...rows]).toEqual([
        { endpoint: "bench-capture", processed: 1, pending: 1, payloads: 2 },
        { endpoint: "bench-inbox", processed: 0, pending: 1, payloads: 1 },
      ]);
      expect(await count(own.db, "webhook_inbox_payloads")).toBe(3);
      // The seed's transaction, on its own one-table inbox.
      expect([...(await own.db`select endpoint, processed_at is not null as processed from naive_inbox`)]).toEqual([
        { endpoint: "bench-seed", processed: true },
      ]);
      expect(await count(own.db, "ledger_entries", "invoice_id like 'in_pgb_%'")).toBe(2);
      // Ours wrote one message (the sync capture); the seed's went to its own outbox.
      expect(await count(own.db, "outbox")).toBe(1);
      expect(await count(own.db, "naive_outbox")).toBe(1);
    } finally {
      await rm(dir, { recursive: true, force: true });
      await own.drop();
    }
  },
  30_000,
);

test.skipIf(!!pgbenchMissing)(
  "`bun run bench --quick --seconds 1 --backlog 1000` runs every section to exit 0 and writes a figure above 0 for each",
  async () => {
    const own = await freshDatabase();
    const out = await mkdtemp(join(tmpdir(), "webhook-inbox-bench-out-"));
    try {
      const child = Bun.spawn([process.execPath, "src/dev/bin/bench.ts", "--quick", "--seconds", "1", "--backlog", "1000", "--out", out], {
        cwd: join(import.meta.dir, "..", ".."),
        env: { ...process.env, DATABASE_URL: own.url, PGBENCH_BIN: pgbench },
        stdout: "pipe",
        stderr: "pipe",
        timeout: 240_000,
      });
      const [, stderr, code] = await Promise.all([new Response(child.stdout).text(), new Response(child.stderr).text(), child.exited]);
      expect({ code, stderr: code === 0 ? "" : stderr.slice(-2000) }).toEqual({ code: 0, stderr: "" });
      const results = JSON.parse(await readFile(join(out, "latest.json"), "utf8")) as Record<
        string,
        { median?: number; requests?: number; p99?: number; ledger_rows?: number }
      >;
      const figures = Object.fromEntries(
        Object.entries(results)
          .filter(([k]) => k !== "machine")
          .map(([k, v]) => [k, (v.median ?? v.p99 ?? 0) > 0]),
      );
      expect(figures).toEqual({
        "pgbench: seed's 6-statement sync transaction @16": true,
        "pgbench: our sync statement @16": true,
        "pgbench: our async statement @16": true,
        "pgbench: inbox insert alone @16": true,
        "receive sync (HTTP through serve) @16": true,
        "naive peer sync (seed's SQL, 60-line Bun receiver) @16": true,
        "receive sync ÷ naive peer @16": true,
        "receive async (HTTP through serve) @16": true,
        "naive peer async (seed's SQL, 60-line Bun receiver) @16": true,
        "receive async ÷ naive peer @16": true,
        "receive async ÷ pgbench insert @16": true,
        "worker drain @4": true,
        "naive worker drain @4": true,
        "worker drain ÷ naive worker @4": true,
        "graphile-worker drain @4": true,
        "graphile-worker drain (batched: local queue + batched completion) @4": true,
        "receive async alone (e2e) @16": true,
        "end to end async, processed @16": true,
        "end to end ÷ receive alone @16": true,
        "duplicate storm": true,
      });
      expect({ requests: results["duplicate storm"]?.requests, ledger: results["duplicate storm"]?.ledger_rows }).toEqual({
        requests: 1000,
        ledger: 1,
      });
      expect(await readFile(join(out, "latest.md"), "utf8")).toContain("| pgbench: our sync statement | 16 |");
    } finally {
      await rm(out, { recursive: true, force: true });
      await own.drop();
    }
  },
  260_000,
);

test("`bun run bench --only bogus` is a usage error (exit 2, naming the sections) before anything starts or is written; --help prints the usage", async () => {
  const out = join(tmpdir(), `webhook-inbox-bench-usage-${process.pid}`);
  const run = (args: string[]) =>
    spawnSync(process.execPath, ["src/dev/bin/bench.ts", ...args], {
      cwd: join(import.meta.dir, "..", ".."),
      encoding: "utf8",
      timeout: 30_000,
    });
  for (const args of [["--only", "bogus"], ["--only", "drain,bogus"], ["--bogus"], ["extra"]]) {
    const bad = run([...args, "--out", out]);
    expect({ args, code: bad.status }).toEqual({ args, code: 2 });
    expect(bad.stderr).toContain("Usage: bun run bench");
    expect(bad.stdout).toBe("");
  }
  expect(run(["--only", "bogus"]).stderr).toStartWith(
    'bench: --only takes ceiling, sync, async, drain, e2e, duplicates, otel, layout; unknown: "bogus"',
  );
  expect(existsSync(out)).toBe(false);
  const help = run(["--help"]);
  expect({ code: help.status, stderr: help.stderr }).toEqual({ code: 0, stderr: "" });
  expect(help.stdout).toStartWith("Usage: bun run bench");
});
