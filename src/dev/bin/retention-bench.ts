// Entry file: `bun run bench:retention [--rows N] [--chunk N]`. Issue 24 §2's measurement: purge of one
// month of a year of settled inbox rows by dropping partitions (the product's purge, src/ops/purge.ts)
// against DELETE of the same rows in the unpartitioned inbox of before sql/0026. Both layouts get the same
// rows (a ~1.5 KB Stripe invoice.paid payload per row, src/dev/bench/payload.ts, varied per row in SQL),
// one after the other in scratch databases (one at a time, to halve the disk used), on a throwaway
// embedded PostgreSQL 18 or, with DATABASE_URL, on that server (never its own database). Prints a table
// of wall time, WAL bytes and sizes; docs/scale.md "Measurements" gives the figures of a 10-million-row run.
import { rmSync } from "node:fs";
import { dirname } from "node:path";
import { parseArgs } from "node:util";
import { benchEventBody } from "../bench/payload.ts";
import { connect, type Db } from "../../db/db.ts";
import { migrate } from "../../db/migrate.ts";
import { purge } from "../../ops/purge.ts";
import { startEmbeddedPostgres, temporaryDataDir, type EmbeddedServer } from "../../runtime/embedded-postgres.ts";
import { loadMigrations } from "../../runtime/migrations-fs.ts";
import { onStopSignals } from "../../runtime/signals.ts";
import { createScratchDatabase, type ScratchDatabase } from "../scratch-database.ts";

const USAGE = `Usage: bun run bench:retention [--rows N] [--chunk N]
  fills a partitioned inbox (all migrations) and an unpartitioned one (migrations up to 0025) with the
  same N settled rows over the 52 weeks before this one, then purges the oldest 4 weeks: by partition
  drop (the product's purge, --whole-partitions) and by DELETE; prints time, WAL bytes and sizes
  --rows N    inbox rows (default 10000000)
  --chunk N   rows per insert … select from generate_series statement (default 100000)`;

/** Prints `problem` and the usage to stderr and exits 2 (before any database exists). */
function usage(problem: string): never {
  console.error(`bench:retention: ${problem}\n\n${USAGE}`);
  process.exit(2);
}
const { values: o } = (() => {
  try {
    return parseArgs({
      options: { rows: { type: "string" }, chunk: { type: "string" }, help: { type: "boolean", short: "h", default: false } },
    });
  } catch (err) {
    usage(err instanceof Error ? err.message : String(err));
  }
})();
if (o.help) {
  console.log(USAGE);
  process.exit(0);
}
/** `--name`'s value as a positive integer; exits 2 with the reason otherwise. */
function count(name: string, value: string | undefined, fallback: number): number {
  const n = Number(value ?? fallback);
  if (Number.isInteger(n) && n > 0) return n;
  usage(`--${name} must be a positive integer, got ${JSON.stringify(value)}`);
}
const rows = count("rows", o.rows, 10_000_000);
const chunk = count("chunk", o.chunk, 100_000);
const WEEKS = 52; // the year of rows
const PURGED_WEEKS = 4; // "one month": the oldest 4 whole weeks, the unit a weekly partition drop removes
const say = (line: string) => console.log(`${new Date().toISOString().slice(11, 19)} ${line}`);

let embedded: EmbeddedServer | undefined;
let dataDir: string | undefined;
const scratches = new Set<ScratchDatabase>();
onStopSignals(
  (signal) => {
    console.error(`bench:retention: ${signal}: stopping; dropping the scratch databases`);
    void (async () => {
      for (const s of scratches) await s.drop().catch(() => {});
      await embedded?.stop().catch(() => {});
      if (dataDir) rmSync(dirname(dataDir), { recursive: true, force: true });
      process.exit(signal === "SIGINT" ? 130 : 143);
    })();
  },
  () => process.exit(1),
);

/** Sizes of webhook_inbox in bytes, summed over its partitions (one row for an unpartitioned table). */
interface Sizes {
  /** pg_total_relation_size: heap, TOAST, free space and visibility maps, indexes. */
  total: number;
  /** pg_relation_size: the heap's main fork. */
  heap: number;
  /** pg_indexes_size. */
  indexes: number;
}
async function sizes(db: Db): Promise<Sizes> {
  const [row] = await db<{ total: string; heap: string; indexes: string }[]>`
    select sum(pg_total_relation_size(relid)) as total,
           sum(pg_relation_size(relid)) as heap,
           sum(pg_indexes_size(relid)) as indexes
      from (select relid from pg_partition_tree('webhook_inbox') union select 'webhook_inbox'::regclass) t
  `;
  return { total: Number(row?.total ?? 0), heap: Number(row?.heap ?? 0), indexes: Number(row?.indexes ?? 0) };
}

/** Wall time (ms) and WAL bytes (pg_wal_lsn_diff of pg_current_wal_lsn before and after) of `fn`. */
async function measured(db: Db, fn: () => Promise<unknown>): Promise<{ ms: number; wal: number }> {
  await db`checkpoint`; // every operation starts after a checkpoint: its first change to a page logs the full page, as in production
  const [before] = await db<{ lsn: string }[]>`select pg_current_wal_lsn()::text as lsn`;
  const t0 = performance.now();
  await fn();
  const ms = performance.now() - t0;
  const [after] = await db<{ wal: string }[]>`select pg_wal_lsn_diff(pg_current_wal_lsn(), ${before?.lsn ?? "0/0"}::pg_lsn)::text as wal`;
  return { ms, wal: Number(after?.wal ?? 0) };
}

/**
 * Fills webhook_inbox with `rows` settled invoice.paid rows, evenly over [start, end), one
 * `insert … select … from generate_series` per `chunk` rows. Each row: a Stripe-like event id, its own
 * invoice and line ids, amount and `created` (= event_created_at); received 1 s and processed 2 s after
 * creation with outcome 'processed', as the receiver and a worker leave a row.
 */
async function fill(db: Db, start: Date, end: Date): Promise<number> {
  // The payload as literal pieces joined by per-row expressions (one pass, cheaper than replace() calls).
  const perRow: Record<string, string> = {
    evt_bench_R_0: "id",
    in_bench_R_0: "'in_1' || suffix",
    il_bench_R_0: "'il_1' || suffix",
    "BENCH-0": "'INV-' || g",
    "1764461520": "extract(epoch from created)::bigint::text",
    ": 2000": "': ' || (100 + g % 49900)::text",
  };
  const payload = benchEventBody("R", 0)
    .split(/(evt_bench_R_0|in_bench_R_0|il_bench_R_0|BENCH-0|1764461520|: 2000)/)
    .map((piece, i) => (i % 2 === 1 ? `(${perRow[piece]})` : `$p$${piece}$p$`))
    .join(" || ");
  const span = `(timestamptz '${start.toISOString()}' + (g - 0.5) / ${rows}::float8 * (timestamptz '${end.toISOString()}' - timestamptz '${start.toISOString()}'))`;
  const statement = (lo: number, hi: number) => `
    insert into webhook_inbox (provider, endpoint, event_id, event_type, payload, source, event_created_at,
                               received_at, processed_at, outcome, attempts, available_at)
    select 'stripe', 'default', id, 'invoice.paid', (${payload})::jsonb,
           'webhook', created, created + interval '1 second', created + interval '2 seconds', 'processed', 0,
           created + interval '1 second'
      from (select g, 'evt_1' || suffix as id, suffix, ${span} as created
              from (select g, upper(substr(md5(g::text), 1, 23)) as suffix from generate_series(${lo}::bigint, ${hi}::bigint) g) k) r`;
  const t0 = performance.now();
  let next = 1;
  let done = 0;
  let reported = 0;
  // Two statements at a time (one per core); each chunk is its own transaction.
  const lane = async () => {
    while (next <= rows) {
      const lo = next;
      const hi = Math.min(rows, lo + chunk - 1);
      next = hi + 1;
      await db.unsafe(statement(lo, hi));
      done += hi - lo + 1;
      if (done - reported >= chunk * 10 || done === rows) {
        reported = done;
        const s = (performance.now() - t0) / 1000;
        say(`  filled ${done} rows in ${s.toFixed(0)} s (${Math.round(done / s)} rows/s)`);
      }
    }
  };
  await Promise.all([lane(), lane()]);
  // A year-old month is long vacuumed and analyzed (all-visible) in production; without this, autovacuum's
  // insert-triggered run would land in the middle of the measured operations.
  const t1 = performance.now();
  await db`vacuum (analyze) webhook_inbox`;
  say(`  vacuum (analyze) after the fill: ${((performance.now() - t1) / 1000).toFixed(0)} s`);
  return (performance.now() - t0) / 1000;
}

/**
 * Replaces the partitions the migration made before the current weeks (one `webhook_inbox_before_…`) by
 * weekly ones from `start`, as a database created a year ago has (serve and worker create them ahead
 * each week), keeping one empty `before` partition under them as sql/0026 does.
 */
async function weeklyPartitionsFrom(db: Db, start: Date): Promise<void> {
  const [old] = await db<{ name: string }[]>`
    select c.relname as name
      from pg_inherits i
      join pg_class c on c.oid = i.inhrelid
     where i.inhparent = 'webhook_inbox'::regclass and c.relname like 'webhook\_inbox\_before\_%'
  `;
  if (old) await db`drop table ${db(old.name)}`;
  await db`
    select webhook_inbox_create_partition(w, w + interval '7 days', 'webhook_inbox_' || to_char(w at time zone 'UTC', 'YYYYMMDD'))
      from generate_series(${start}::timestamptz, date_trunc('week', now(), 'UTC') - interval '7 days', interval '7 days') w
  `;
  const name = `webhook_inbox_before_${start.toISOString().slice(0, 10).replaceAll("-", "")}`;
  await db`
    select format('create table %I partition of webhook_inbox for values from (%L) to (%L)', ${name}::text, '1970-01-01 00:00:00+00', ${start}::timestamptz) as ddl
  `.then(([r]) => db.unsafe((r as { ddl: string }).ddl));
}

const mib = (bytes: number) => `${(bytes / 2 ** 20).toFixed(0)} MiB`;
const fmtSizes = (s: Sizes) => `${mib(s.total)} (heap ${mib(s.heap)}, indexes ${mib(s.indexes)})`;

let exitCode = 0;
try {
  let serverUrl = process.env.DATABASE_URL;
  if (!serverUrl) {
    dataDir = await temporaryDataDir("webhook-inbox-retention-pg-");
    // Checkpoints less often while filling (every measured operation still starts after one: see measured()).
    embedded = await startEmbeddedPostgres({ dir: dataDir, port: 0, flags: ["-c", "max_wal_size=4GB"] });
    serverUrl = embedded.url;
  }
  const all = loadMigrations();
  let span = { start: new Date(0), end: new Date(0) };
  const lines: string[] = [];
  // The same figures for scripts and test/dev/retention-bench.test.ts: the last line of stdout, after "json: ".
  const results: Record<string, unknown> = { rows, weeks: WEEKS, purgedWeeks: PURGED_WEEKS };
  const table = ["| layout | operation | rows removed | wall time | WAL | inbox size before | inbox size after |", "|---|---|---|---|---|---|---|"];

  // 1. Partitioned (every migration): purge by partition drop.
  {
    const scratch = await createScratchDatabase(serverUrl, "retention_bench_partitioned");
    scratches.add(scratch);
    const db = connect(scratch.url, { max: 3, applicationName: "webhook-inbox bench:retention" });
    try {
      await migrate(db, all);
      const [meta] = await db<{ version: string; start: Date; end: Date }[]>`
        select current_setting('server_version') as version,
               date_trunc('week', now(), 'UTC') - ${WEEKS} * interval '7 days' as start,
               date_trunc('week', now(), 'UTC') as end
      `;
      const { start, end } = meta!;
      span = { start, end };
      lines.push(`PostgreSQL ${meta!.version}; ${rows} rows evenly over ${start.toISOString()} – ${end.toISOString()} (${WEEKS} weeks); purged: the oldest ${PURGED_WEEKS} weeks`);
      say(lines[0]!);
      await weeklyPartitionsFrom(db, start);
      say("partitioned inbox (sql/0001–0026): filling");
      const fillS = await fill(db, start, end);
      const before = await sizes(db);
      say(`  filled in ${fillS.toFixed(0)} s; size ${fmtSizes(before)}`);
      // now() − olderThanMs lands a minute after the 4th week's end: its partitions (and only they) are entirely older.
      const [{ olderThanMs } = { olderThanMs: 0 }] = await db<{ olderThanMs: number }[]>`
        select (extract(epoch from now() - (${start}::timestamptz + ${PURGED_WEEKS * 7} * interval '1 day')) * 1000 - 60000)::bigint::float8 as "olderThanMs"
      `;
      let result: Awaited<ReturnType<typeof purge>> | undefined;
      const m = await measured(db, async () => {
        result = await purge(db, { olderThanMs, wholePartitions: true });
      });
      const after = await sizes(db);
      say(`  purge (partition drop): ${JSON.stringify({ ...m, deleted: result?.deleted, dropped: result?.partitionsDropped })}`);
      results.partitioned = { fillS, before, after, purge: { ...m, deleted: result?.deleted, partitionsDropped: result?.partitionsDropped } };
      table.push(
        `| partitioned (0026) | purge --whole-partitions: ${result?.partitionsDropped.length} partitions detached and dropped | ${result?.deleted} | ${(m.ms / 1000).toFixed(2)} s | ${mib(m.wal)} (${m.wal} B) | ${fmtSizes(before)} | ${fmtSizes(after)} |`,
      );
    } finally {
      await db.end({ timeout: 5 });
      await scratch.drop();
      scratches.delete(scratch);
    }
  }

  // 2. Unpartitioned (migrations up to 0025, the layout before sql/0026): DELETE of the same rows, then VACUUM.
  {
    const scratch = await createScratchDatabase(serverUrl, "retention_bench_unpartitioned");
    scratches.add(scratch);
    const db = connect(scratch.url, { max: 3, applicationName: "webhook-inbox bench:retention" });
    try {
      await migrate(
        db,
        all.filter((m) => m.version <= 25),
      );
      const { start, end } = span; // the same rows as the partitioned inbox had, even across a Monday
      say("unpartitioned inbox (sql/0001–0025): filling");
      const fillS = await fill(db, start, end);
      const before = await sizes(db);
      say(`  filled in ${fillS.toFixed(0)} s; size ${fmtSizes(before)}`);
      const cutoff = new Date(start.getTime() + PURGED_WEEKS * 7 * 86_400_000);
      let deleted = 0;
      // One statement, the predicate the pre-0026 purge used (settled rows older than the cutoff).
      const m = await measured(db, async () => {
        deleted = (await db`delete from webhook_inbox where processed_at is not null and event_created_at < ${cutoff}`).count;
      });
      const afterDelete = await sizes(db);
      say(`  delete: ${JSON.stringify({ ...m, deleted })}; size ${fmtSizes(afterDelete)}`);
      table.push(
        `| unpartitioned (0025) | delete … where event_created_at < 4 weeks after the start | ${deleted} | ${(m.ms / 1000).toFixed(2)} s | ${mib(m.wal)} (${m.wal} B) | ${fmtSizes(before)} | ${fmtSizes(afterDelete)} |`,
      );
      const v = await measured(db, () => db`vacuum webhook_inbox`);
      const afterVacuum = await sizes(db);
      say(`  vacuum: ${JSON.stringify(v)}; size ${fmtSizes(afterVacuum)}`);
      results.unpartitioned = { fillS, before, delete: { ...m, deleted }, afterDelete, vacuum: v, afterVacuum };
      table.push(
        `| unpartitioned (0025) | then a plain vacuum | — | ${(v.ms / 1000).toFixed(2)} s | ${mib(v.wal)} (${v.wal} B) | ${fmtSizes(afterDelete)} | ${fmtSizes(afterVacuum)} |`,
      );
    } finally {
      await db.end({ timeout: 5 });
      await scratch.drop();
      scratches.delete(scratch);
    }
  }
  console.log(`\n${lines.join("\n")}\n\n${table.join("\n")}\n\njson: ${JSON.stringify(results)}`);
} catch (err) {
  console.error(`bench:retention: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}`);
  exitCode = 1;
}
for (const s of scratches) await s.drop().catch(() => {});
await embedded?.stop();
if (dataDir) rmSync(dirname(dataDir), { recursive: true, force: true });
process.exit(exitCode);
