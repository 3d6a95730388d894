// Entry file: `bun run bench:migration [--rows N] [--from 25,26]`. Measures the upgrade to the current
// schema (the last migration: sql/0027, the state rows apart from the payloads) of an inbox holding N rows,
// from schema 0025 (one unpartitioned table: 0026 and 0027 run in one transaction) and from schema 0026
// (partitioned by the sender's creation time). The rows: a ~1.5 KB Stripe invoice.paid payload each
// (src/dev/bench/payload.ts), 98 % processed, 1 % queued, 1 % needs-review, received over the 8 weeks
// before now. While the migration runs, a second connection asks for the lock a receiver's insert needs
// (ROW EXCLUSIVE on webhook_inbox) every 100 ms, and a third samples the locks the migrating backend holds.
// Prints, per starting schema: migration time, WAL bytes, the longest wait of a write, and the locks held;
// docs/operations.md "Upgrading to 0027" gives the figures of a 1,000,000-row run. On a throwaway embedded
// PostgreSQL 18, or with DATABASE_URL on scratch databases of that server (never its own database).
import { rmSync } from "node:fs";
import { dirname } from "node:path";
import { benchArgs } from "../bench/bench-args.ts";
import postgres from "postgres";
import { benchEventBody } from "../bench/payload.ts";
import { migrate } from "../../db/migrate.ts";
import { startEmbeddedPostgres, temporaryDataDir, type EmbeddedServer } from "../../runtime/embedded-postgres.ts";
import { loadMigrations } from "../../runtime/migrations-fs.ts";
import { onStopSignals } from "../../runtime/signals.ts";
import { createScratchDatabase, type ScratchDatabase } from "../scratch-database.ts";

const USAGE = `Usage: bun run bench:migration [--rows N] [--from 25,26] [--chunk N]
  fills an inbox at each starting schema with N rows, then migrates it to the current schema while a
  writer waits for the table; prints time, WAL bytes, the longest write wait and the locks taken
  --rows N     inbox rows (default 1000000)
  --from LIST  starting schemas, comma-separated, from 25 and 26 (default 25,26)
  --chunk N    rows per insert … select from generate_series statement (default 100000)`;

const args = benchArgs("bench:migration", USAGE, {
  rows: { type: "string" },
  from: { type: "string" },
  chunk: { type: "string" },
});
const o = args.values;
const usage = args.usage;
const rows = args.whole("rows", o.rows, 1_000_000);
const chunk = args.whole("chunk", o.chunk, 100_000);
const starts = (o.from ?? "25,26").split(",").map((v) => {
  if (v !== "25" && v !== "26") usage(`--from takes 25 and 26, got "${v}"`);
  return Number(v) as 25 | 26;
});
const ALL = loadMigrations();
const say = (line: string) => console.log(`${new Date().toISOString().slice(11, 19)} ${line}`);

let embedded: EmbeddedServer | undefined;
let dataDir: string | undefined;
const scratches = new Set<ScratchDatabase>();
onStopSignals(
  (signal) => {
    console.error(`bench:migration: ${signal}: stopping; dropping the scratch databases`);
    void (async () => {
      for (const s of scratches) await s.drop().catch(() => {});
      await embedded?.stop().catch(() => {});
      if (dataDir) rmSync(dirname(dataDir), { recursive: true, force: true });
      process.exit(signal === "SIGINT" ? 130 : 143);
    })();
  },
  () => process.exit(1),
);

/** Fills the inbox of schema `at` with `rows` rows as that schema's code wrote them, `chunk` per statement. */
async function fill(sql: postgres.Sql, at: 25 | 26): Promise<void> {
  const template = benchEventBody("MIG", 0);
  for (let from = 0; from < rows; from += chunk) {
    const to = Math.min(rows, from + chunk) - 1;
    // Every 100th row queued, every 100th (offset 50) parked; received over the 8 weeks before now.
    await sql`
      insert into webhook_inbox (provider, endpoint, event_id, event_type, payload, received_at, available_at, event_created_at,
                                 processed_at, outcome, needs_review_at, last_error, attempts)
      select 'stripe', 'billing', 'evt_mig_' || g, 'invoice.paid',
             replace(replace(${template}, 'evt_bench_MIG_0', 'evt_mig_' || g), 'in_bench_MIG_0', 'in_mig_' || g)::jsonb,
             r, r, ${at === 25 ? sql`r` : sql`r - interval '1 second'`},
             case when g % 100 not in (0, 50) then r end, case when g % 100 not in (0, 50) then 'processed' end,
             case when g % 100 = 50 then r end, case when g % 100 = 50 then 'parked by the bench' end,
             case when g % 100 = 0 then 0 else 1 end
        from generate_series(${from}::int, ${to}::int) g,
             lateral (select now() - (${rows}::int - g) * (interval '8 weeks' / ${rows}::int) as r) t
    `;
  }
  await sql`vacuum (analyze) webhook_inbox`;
  await sql`checkpoint`;
}

/** Migrates to the current schema while a writer waits for the table and a sampler reads the migration's locks. */
async function measure(url: string, at: 25 | 26) {
  const sql = postgres(url, { max: 1, onnotice: () => {}, connection: { application_name: "bench:migration migrate" } });
  const writer = postgres(url, { max: 1, onnotice: () => {} });
  const sampler = postgres(url, { max: 1, onnotice: () => {} });
  try {
    const [{ pid } = { pid: 0 }] = await sql<{ pid: number }[]>`select pg_backend_pid() as pid`;
    const [{ lsn: lsn0 } = { lsn: "" }] = await sql<{ lsn: string }[]>`select pg_current_wal_lsn()::text as lsn`;
    let running = true;
    let longestWaitMs = 0;
    const locks = new Map<string, string>();
    const writes = (async () => {
      while (running) {
        const t = performance.now();
        await writer.begin(async (tx) => void (await tx`lock table webhook_inbox in row exclusive mode`)).catch(() => {});
        longestWaitMs = Math.max(longestWaitMs, performance.now() - t);
        await Bun.sleep(100);
      }
    })();
    const samples = (async () => {
      while (running) {
        const held = await sampler<{ rel: string; mode: string }[]>`
          select coalesce(c.relname, l.locktype) as rel, l.mode
            from pg_locks l
            left join pg_class c on c.oid = l.relation
           where l.pid = ${pid} and l.granted and l.locktype = 'relation' and c.relkind in ('r', 'p', 'v') and c.relname like 'webhook_inbox%'
        `.catch(() => []);
        for (const h of held) {
          // One line for all the partitions of a table: a week's, the older rows', the undated and the default one.
          const name = h.rel.replace(/_(before_\d{8}|\d{8}|undated|default)$/, "_<partitions>");
          const modes = new Set((locks.get(name) ?? "").split(", ").filter(Boolean));
          modes.add(h.mode);
          locks.set(name, [...modes].sort().join(", "));
        }
        await Bun.sleep(50);
      }
    })();
    const t0 = performance.now();
    const applied = await migrate(sql, ALL);
    const seconds = (performance.now() - t0) / 1000;
    running = false;
    await Promise.all([writes, samples]);
    const [{ wal } = { wal: 0 }] = await sql<
      { wal: number }[]
    >`select pg_wal_lsn_diff(pg_current_wal_lsn(), ${lsn0}::pg_lsn)::float8 as wal`;
    const [after] = await sql<{ state: number; payloads: number; bytes: number }[]>`
      select (select count(*) from webhook_inbox)::int as state, (select count(*) from webhook_inbox_payloads)::int as payloads,
             (pg_total_relation_size('webhook_inbox') + coalesce((select sum(pg_total_relation_size(relid)) from pg_partition_tree('webhook_inbox_payloads')), 0))::float8 as bytes
    `;
    return { applied, seconds, wal, longestWaitMs, locks, after };
  } finally {
    await Promise.all([sql.end({ timeout: 5 }), writer.end({ timeout: 5 }), sampler.end({ timeout: 5 })]);
  }
}

const mib = (bytes: number) => `${(bytes / 1_048_576).toFixed(0)} MiB`;
let serverUrl = process.env.DATABASE_URL;
try {
  if (!serverUrl) {
    dataDir = await temporaryDataDir();
    embedded = await startEmbeddedPostgres({ dir: dataDir, port: 0 });
    serverUrl = embedded.url;
  }
  const lines: string[] = [];
  for (const at of starts) {
    const scratch = await createScratchDatabase(serverUrl, `webhook_inbox_migration_${at}`);
    scratches.add(scratch);
    const sql = postgres(scratch.url, { max: 1, onnotice: () => {} });
    await migrate(
      sql,
      ALL.filter((m) => m.version <= at),
    );
    say(`from 00${at}: filling ${rows} rows`);
    await fill(sql, at);
    const [{ bytes } = { bytes: 0 }] = await sql<{ bytes: number }[]>`
      select coalesce((select sum(pg_total_relation_size(relid)) from pg_partition_tree('webhook_inbox')), pg_total_relation_size('webhook_inbox'))::float8 as bytes
    `;
    await sql.end({ timeout: 5 });
    say(`from 00${at}: ${mib(bytes)}; migrating`);
    const m = await measure(scratch.url, at);
    const line =
      `from 00${at} (${m.applied.join(" + ")}): ${rows} rows, ${mib(bytes)} → ${mib(m.after?.bytes ?? 0)}; ` +
      `${m.seconds.toFixed(1)} s, WAL ${mib(m.wal)}; a write waited at most ${(m.longestWaitMs / 1000).toFixed(1)} s; ` +
      `state rows ${m.after?.state}, payload rows ${m.after?.payloads}; locks held: ${[...m.locks].map(([rel, modes]) => `${rel} (${modes})`).join("; ")}`;
    say(line);
    lines.push(line);
    await scratch.drop();
    scratches.delete(scratch);
  }
  console.log(`\n${lines.join("\n")}`);
} catch (err) {
  console.error(`bench:migration: ${err instanceof Error ? err.message : String(err)}`);
  process.exitCode = 1;
}
for (const s of scratches) await s.drop().catch(() => {});
await embedded?.stop();
if (dataDir) rmSync(dirname(dataDir), { recursive: true, force: true });
process.exit(process.exitCode ?? 0);
