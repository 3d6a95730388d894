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
import { capturedScript, inboxOnlyScript, seedSyncScript } from "../../src/dev/bench/scripts.ts";
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
      timeout: 100_000,
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
}, 120_000);

// The before side is the commit before src/inbox/partitions.ts was added, read from git history: a shallow
// clone or an exported tree has none, and the test is one named skip there.
const partitionsHistory =
  Bun.spawnSync(["git", "log", "--diff-filter=A", "--format=%H", "--", "src/inbox/partitions.ts"], {
    cwd: join(import.meta.dir, "..", ".."),
  })
    .stdout.toString()
    .trim() !== "";
if (!partitionsHistory)
  console.log("skip: bench --only partitions test: no git history holding the commit that added src/inbox/partitions.ts");
(partitionsHistory ? test : test.skip)(
  "`bun run bench --only partitions` serves the code before the partitioned inbox on its unpartitioned schema and this tree on the partitioned one, in turns, prints the ratio and drops both scratch databases",
  async () => {
    const out = await mkdtemp(join(tmpdir(), "webhook-inbox-bench-out-"));
    try {
      const child = Bun.spawn(
        [process.execPath, "src/dev/bin/bench.ts", "--quick", "--seconds", "1", "--only", "partitions", "--out", out],
        {
          cwd: join(import.meta.dir, "..", ".."),
          env: { ...process.env, DATABASE_URL: fresh.url },
          stdout: "pipe",
          stderr: "pipe",
          timeout: 150_000,
        },
      );
      const [stdout, stderr, code] = await Promise.all([
        new Response(child.stdout).text(),
        new Response(child.stderr).text(),
        child.exited,
      ]);
      expect({ code, stderr: code === 0 ? "" : stderr.slice(-2000) }).toEqual({ code: 0, stderr: "" });
      expect(stdout).toMatch(/partitions: before \(\w+, unpartitioned\): 25 migrations, the last 0025_/);
      expect(stdout).toMatch(/partitions: after \(this tree, partitioned\): 26 migrations, the last 0026_inbox_partitions\.sql/);
      const results = JSON.parse(await readFile(join(out, "latest.json"), "utf8")) as Record<
        string,
        { median: number; loads?: { statuses: Record<string, number> }[] }
      >;
      for (const mode of ["sync", "async"]) {
        expect(results[`receive ${mode}, partitioned ÷ unpartitioned @16`]?.median).toBeGreaterThan(0);
        for (const side of ["before", "after"]) {
          const key = Object.keys(results).find((k) => k.startsWith(`receive ${mode}, ${side} (`));
          const statuses = results[key ?? ""]?.loads?.[0]?.statuses ?? {};
          // Every delivery was recorded (2xx) by both receivers: each ran against a schema it understands.
          expect({
            key: key !== undefined,
            recorded: (statuses["2xx"] ?? 0) > 0,
            other: Object.keys(statuses).filter((s) => s !== "2xx"),
          }).toEqual({
            key: true,
            recorded: true,
            other: [],
          });
        }
      }
      const scratch = await db<{ datname: string }[]>`select datname from pg_database where datname like 'webhook_inbox_bench%'`;
      expect([...scratch]).toEqual([]);
    } finally {
      await rm(out, { recursive: true, force: true });
    }
  },
  180_000,
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
        inbox: inboxOnlyScript(),
      };
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
      const rows = await own.db<{ endpoint: string; processed: number; pending: number }[]>`
      select endpoint, count(*) filter (where processed_at is not null)::int as processed, count(*) filter (where processed_at is null)::int as pending
        from webhook_inbox
       group by endpoint
       order by endpoint
    `;
      expect([...rows]).toEqual([
        { endpoint: "bench-capture", processed: 1, pending: 1 },
        { endpoint: "bench-inbox", processed: 0, pending: 1 },
        { endpoint: "bench-seed", processed: 1, pending: 0 },
      ]);
      expect(await count(own.db, "ledger_entries", "invoice_id like 'in_pgb_%'")).toBe(2);
      expect(await count(own.db, "outbox")).toBe(2);
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
        timeout: 100_000,
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
        "graphile-worker drain @4": true,
        "graphile-worker drain (batched: local queue + batched completion) @4": true,
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
  120_000,
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
    'bench: --only takes ceiling, sync, async, drain, duplicates, otel, partitions; unknown: "bogus"',
  );
  expect(existsSync(out)).toBe(false);
  const help = run(["--help"]);
  expect({ code: help.status, stderr: help.stderr }).toEqual({ code: 0, stderr: "" });
  expect(help.stdout).toStartWith("Usage: bun run bench");
});
