// Entry file: `bun run bench:retention [--rows N] [--chunk N] [--plain-delete]`. Retention on the layout of
// sql/0027: a year of settled events (narrow state rows in webhook_inbox, their ~1.5 KB Stripe invoice.paid
// payloads, src/dev/bench/payload.ts varied per row in SQL, in weekly partitions of webhook_inbox_payloads)
// loses its oldest 4 weeks to the product's purge (src/ops/purge.ts): the keys, deleted in batches, and the
// payloads, dropped by whole partition, measured apart, then a VACUUM of webhook_inbox. In a scratch database
// on a throwaway embedded PostgreSQL 18 or, with DATABASE_URL, on that server (never its own database). Prints
// a table of wall time, WAL bytes, sizes and dead tuples; docs/scale.md "Measurements" gives the figures.
import { rmSync } from "node:fs";
import { dirname } from "node:path";
import { benchArgs } from "../bench/bench-args.ts";
import { benchEventBody } from "../bench/payload.ts";
import { checkpoint, walBytesSince, walPosition } from "../bench/wal.ts";
import { connect, type Db } from "../../db/db.ts";
import { migrate } from "../../db/migrate.ts";
import { purge, type PurgeResult } from "../../ops/purge.ts";
import { startEmbeddedPostgres, temporaryDataDir, type EmbeddedServer } from "../../runtime/embedded-postgres.ts";
import { loadMigrations } from "../../runtime/migrations-fs.ts";
import { onStopSignals } from "../../runtime/signals.ts";
import { createScratchDatabase, type ScratchDatabase } from "../scratch-database.ts";

const USAGE = `Usage: bun run bench:retention [--rows N] [--chunk N] [--plain-delete]
  fills the inbox (every migration: state rows in webhook_inbox, payloads in weekly partitions of
  webhook_inbox_payloads) with N settled rows received over the 52 weeks before this one, then purges the
  oldest 4 weeks with the product's purge(): the keys (settled state rows deleted in batches), then the
  payloads (whole partitions dropped), then a VACUUM of webhook_inbox; prints wall time, WAL bytes, sizes
  and the dead tuples left in webhook_inbox after each
  --rows N        inbox rows (default 10000000)
  --chunk N       rows per insert … select from generate_series statement (default 100000)
  --plain-delete  first, for comparison, one plain DELETE of the same keys, rolled back (its WAL is
                  written all the same); the purge then deletes them for real`;

const args = benchArgs("bench:retention", USAGE, {
  rows: { type: "string" },
  chunk: { type: "string" },
  "plain-delete": { type: "boolean", default: false },
});
const o = args.values;
const rows = args.whole("rows", o.rows, 10_000_000);
const chunk = args.whole("chunk", o.chunk, 100_000);
const WEEKS = 52; // the year of rows
const PURGED_WEEKS = 4; // "one month": the oldest 4 whole weeks, the unit a weekly partition drop removes
/** A retention no row reaches (100 years, ms): the half of purge() not being measured removes nothing. */
const NEVER_MS = 100 * 365 * 86_400_000;
const say = (line: string) => console.log(`${new Date().toISOString().slice(11, 19)} ${line}`);

let embedded: EmbeddedServer | undefined;
let dataDir: string | undefined;
const scratches = new Set<ScratchDatabase>();
onStopSignals(
  (signal) => {
    console.error(`bench:retention: ${signal}: stopping; dropping the scratch database`);
    void (async () => {
      for (const s of scratches) await s.drop().catch(() => {});
      await embedded?.stop().catch(() => {});
      if (dataDir) rmSync(dirname(dataDir), { recursive: true, force: true });
      process.exit(signal === "SIGINT" ? 130 : 143);
    })();
  },
  () => process.exit(1),
);

/** Sizes of a table in bytes, summed over its partitions (the table alone when it has none). */
interface Sizes {
  /** pg_total_relation_size: heap, TOAST, free space and visibility maps, indexes. */
  total: number;
  /** pg_relation_size: the heap's main fork. */
  heap: number;
  /** pg_indexes_size. */
  indexes: number;
}
async function sizes(db: Db, table: "webhook_inbox" | "webhook_inbox_payloads"): Promise<Sizes> {
  const [row] = await db<{ total: string; heap: string; indexes: string }[]>`
    select sum(pg_total_relation_size(relid)) as total,
           sum(pg_relation_size(relid)) as heap,
           sum(pg_indexes_size(relid)) as indexes
      from (select relid from pg_partition_tree(${table}::regclass) union select ${table}::regclass) t
  `;
  return { total: Number(row?.total ?? 0), heap: Number(row?.heap ?? 0), indexes: Number(row?.indexes ?? 0) };
}

/**
 * Dead tuples in webhook_inbox: pg_stat_user_tables.n_dead_tup right after an `analyze`, which sets it from
 * its sample (every page of a small table; an estimate from 30,000 pages of a large one). Sound only once
 * the backends that deleted have flushed their own counts, which they add on top: see {@link measured}.
 */
async function deadTuples(db: Db): Promise<number> {
  await db`analyze webhook_inbox`;
  const [row] = await db<{ n: string }[]>`select n_dead_tup::text as n from pg_stat_user_tables where relid = 'webhook_inbox'::regclass`;
  return Number(row?.n ?? 0);
}

/** Rows in each table and the payload partitions (names), for the JSON line. */
async function contents(db: Db): Promise<{ stateRows: number; payloadRows: number; partitions: string[] }> {
  const [row] = await db<{ state: number; payloads: number }[]>`
    select (select count(*) from webhook_inbox)::int as state, (select count(*) from webhook_inbox_payloads)::int as payloads
  `;
  const parts = await db<{ name: string }[]>`
    select c.relname as name from pg_inherits i join pg_class c on c.oid = i.inhrelid
     where i.inhparent = 'webhook_inbox_payloads'::regclass order by 1
  `;
  return { stateRows: row?.state ?? 0, payloadRows: row?.payloads ?? 0, partitions: parts.map((p) => p.name) };
}

/**
 * Wall time (ms) and WAL bytes of `fn`, which starts right after a checkpoint (its first change to a page
 * logs the full page, as in production) and runs on a pool of its own: one connection, opened before the
 * clock starts, whose table statistics are flushed before it closes (`pg_stat_force_next_flush()`, flushed
 * as the statement ends), so no late report of its deletes lands on a count read afterwards.
 */
async function measured(db: Db, url: string, fn: (own: Db) => Promise<unknown>): Promise<{ ms: number; wal: number }> {
  const own = connect(url, { max: 1, applicationName: "webhook-inbox bench:retention" });
  try {
    await own`select 1`;
    if (!(await checkpoint(db)))
      say("  (checkpoint refused: the role needs pg_checkpoint; the WAL figure includes pages not logged since the last one)");
    const lsn = await walPosition(db);
    const t0 = performance.now();
    await fn(own);
    const ms = performance.now() - t0;
    const wal = await walBytesSince(db, lsn);
    await own`select pg_stat_force_next_flush()`;
    return { ms, wal };
  } finally {
    await own.end({ timeout: 5 });
  }
}

/**
 * Fills the inbox with `rows` settled invoice.paid events received evenly over [start, end), one
 * `insert … select … from generate_series` per `chunk` rows writing both tables, as insertInbox does: each
 * state row (a Stripe-like event id, created 1 s before it was received and processed 1 s after, outcome
 * 'processed', livemode false) and its payload row (its own invoice and line ids, amount and `created`)
 * under the same key and received_at, so the payload lands in that week's partition.
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
  // received_at spread evenly over the year; the sender created each event a second before.
  const span = `(timestamptz '${start.toISOString()}' + (g - 0.5) / ${rows}::float8 * (timestamptz '${end.toISOString()}' - timestamptz '${start.toISOString()}'))`;
  const statement = (lo: number, hi: number) => `
    with r as materialized (
      select g, 'evt_1' || suffix as id, suffix, received - interval '1 second' as created, received
        from (select g, upper(substr(md5(g::text), 1, 23)) as suffix, ${span} as received
                from generate_series(${lo}::bigint, ${hi}::bigint) g) k
    ), state as (
      insert into webhook_inbox (provider, endpoint, event_id, event_type, livemode, source, event_created_at,
                                 received_at, available_at, processed_at, outcome, attempts)
      select 'stripe', 'default', id, 'invoice.paid', false, 'webhook', created,
             received, received, received + interval '1 second', 'processed', 0
        from r
    )
    insert into webhook_inbox_payloads (provider, endpoint, event_id, received_at, payload)
    select 'stripe', 'default', id, received, (${payload})::jsonb
      from r`;
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
  await db`vacuum (analyze) webhook_inbox, webhook_inbox_payloads`;
  say(`  vacuum (analyze) after the fill: ${((performance.now() - t1) / 1000).toFixed(0)} s`);
  return (performance.now() - t0) / 1000;
}

/**
 * Gives webhook_inbox_payloads weekly partitions from `start`, as a database that has run for a year has
 * them (every process creates the weeks ahead): the migration's one `webhook_inbox_payloads_before_…`
 * partition (empty here) is replaced by weeks made with `webhook_inbox_payloads_create_partition`, with
 * one empty `before` partition kept under them, as sql/0027 leaves one.
 */
async function weeklyPartitionsFrom(db: Db, start: Date): Promise<void> {
  const [old] = await db<{ name: string }[]>`
    select c.relname as name
      from pg_inherits i
      join pg_class c on c.oid = i.inhrelid
     where i.inhparent = 'webhook_inbox_payloads'::regclass and c.relname like 'webhook\_inbox\_payloads\_before\_%'
  `;
  if (old) await db`drop table ${db(old.name)}`;
  await db`
    select webhook_inbox_payloads_create_partition(w, 'webhook_inbox_payloads_' || to_char(w at time zone 'UTC', 'YYYYMMDD'))
      from generate_series(${start}::timestamptz, date_trunc('week', now(), 'UTC') - interval '7 days', interval '7 days') w
  `;
  const name = `webhook_inbox_payloads_before_${start.toISOString().slice(0, 10).replaceAll("-", "")}`;
  const [ddl] = await db<{ ddl: string }[]>`
    select format('create table %I partition of webhook_inbox_payloads for values from (minvalue) to (%L)', ${name}::text, ${start}::timestamptz) as ddl
  `;
  await db.unsafe(ddl!.ddl);
}

/** The key retention, ms, that puts purge's horizon (now() − it) at `boundary` or a few ms past it (never before: floored). */
async function retentionTo(db: Db, boundary: Date): Promise<number> {
  const [row] = await db<{ ms: number }[]>`select floor(extract(epoch from now() - ${boundary}::timestamptz) * 1000)::float8 as ms`;
  return row?.ms ?? 0;
}

/** Bytes for the table: MiB, or KiB below one MiB (a small run's figures). */
const mib = (bytes: number) => (bytes < 2 ** 20 ? `${(bytes / 2 ** 10).toFixed(0)} KiB` : `${(bytes / 2 ** 20).toFixed(0)} MiB`);
const fmtSizes = (s: Sizes) => `${mib(s.total)} (heap ${mib(s.heap)}, indexes ${mib(s.indexes)})`;
class Rollback extends Error {}

let exitCode = 0;
try {
  let serverUrl = process.env.DATABASE_URL;
  if (!serverUrl) {
    dataDir = await temporaryDataDir("webhook-inbox-retention-pg-");
    // Checkpoints less often while filling (every measured operation still starts after one: see measured()).
    embedded = await startEmbeddedPostgres({ dir: dataDir, port: 0, flags: ["-c", "max_wal_size=4GB"] });
    serverUrl = embedded.url;
  }
  const lines: string[] = [];
  // The same figures for scripts and test/dev/retention-bench.test.ts: the last line of stdout, after "json: ".
  const results: Record<string, unknown> = { rows, weeks: WEEKS, purgedWeeks: PURGED_WEEKS };
  const table = [
    "| operation | rows removed | wall time | WAL | size before | size after | dead tuples in webhook_inbox after |",
    "|---|---|---|---|---|---|---|",
  ];
  const scratch = await createScratchDatabase(serverUrl, "retention_bench");
  scratches.add(scratch);
  const db = connect(scratch.url, { max: 3, applicationName: "webhook-inbox bench:retention" });
  try {
    const applied = await migrate(db, loadMigrations());
    const [meta] = await db<{ version: string; start: Date; end: Date }[]>`
      select current_setting('server_version') as version,
             date_trunc('week', now(), 'UTC') - ${WEEKS} * interval '7 days' as start,
             date_trunc('week', now(), 'UTC') as end
    `;
    const { start, end } = meta!;
    const boundary = new Date(start.getTime() + PURGED_WEEKS * 7 * 86_400_000);
    lines.push(
      `PostgreSQL ${meta!.version}; migrations up to ${applied.at(-1)}; ${rows} rows received evenly over ${start.toISOString()} – ${end.toISOString()} (${WEEKS} weeks); purged: the oldest ${PURGED_WEEKS} weeks (received before ${boundary.toISOString()})`,
    );
    say(lines[0]!);
    await weeklyPartitionsFrom(db, start);
    say("filling (state rows and payload rows)");
    const fillS = await fill(db, start, end);
    const state0 = await sizes(db, "webhook_inbox");
    const payloads0 = await sizes(db, "webhook_inbox_payloads");
    const before = await contents(db);
    say(`  filled in ${fillS.toFixed(0)} s; webhook_inbox ${fmtSizes(state0)}; webhook_inbox_payloads ${fmtSizes(payloads0)}`);
    results.fillS = fillS;
    results.before = { ...before, state: state0, payloads: payloads0, deadTuples: await deadTuples(db) };

    // For comparison: one plain DELETE of the same keys, rolled back (the rows stay for the purge below).
    if (o["plain-delete"]) {
      let deleted = 0;
      const m = await measured(db, scratch.url, (own) =>
        own
          .begin(async (tx) => {
            deleted = (await tx`delete from webhook_inbox where processed_at is not null and received_at < ${boundary}`).count;
            throw new Rollback();
          })
          .catch((err: unknown) => {
            if (!(err instanceof Rollback)) throw err;
          }),
      );
      say(`  plain delete (rolled back): ${JSON.stringify({ ...m, deleted })}`);
      results.plainDelete = { ...m, deleted };
      table.push(
        `| comparison: one plain \`delete\` of the same keys (rolled back; its WAL is written all the same) | ${deleted} | ${(m.ms / 1000).toFixed(2)} s | ${mib(m.wal)} (${m.wal} B) | — | — | — |`,
      );
    }

    // 1. The keys: purge() with the payload horizon out of reach, so it deletes settled state rows only.
    let keys: PurgeResult | undefined;
    const k = await measured(db, scratch.url, async (own) => {
      keys = await purge(own, { olderThanMs: await retentionTo(own, boundary), payloadsOlderThanMs: NEVER_MS });
    });
    const state1 = await sizes(db, "webhook_inbox");
    const dead1 = await deadTuples(db);
    say(`  purge, keys: ${JSON.stringify({ ...k, deleted: keys?.deleted, deadTuples: dead1 })}; webhook_inbox ${fmtSizes(state1)}`);
    results.keys = { ...k, result: keys, after: state1, deadTuples: dead1 };
    table.push(
      `| purge(), keys: settled state rows deleted in batches of 1000 | ${keys?.deleted} | ${(k.ms / 1000).toFixed(2)} s | ${mib(k.wal)} (${k.wal} B) | webhook_inbox ${fmtSizes(state0)} | ${fmtSizes(state1)} | ${dead1} |`,
    );

    // 2. The payloads: purge() with the key horizon out of reach, so it drops payload partitions only.
    let payloads: PurgeResult | undefined;
    const p = await measured(db, scratch.url, async (own) => {
      payloads = await purge(own, { olderThanMs: NEVER_MS, payloadsOlderThanMs: await retentionTo(own, boundary) });
    });
    const payloads2 = await sizes(db, "webhook_inbox_payloads");
    const dead2 = await deadTuples(db);
    const dropped = payloads?.partitionsDropped ?? [];
    say(
      `  purge, payloads: ${JSON.stringify({ ...p, dropped, payloadsDropped: payloads?.payloadsDropped })}; webhook_inbox_payloads ${fmtSizes(payloads2)}`,
    );
    results.payloads = { ...p, result: payloads, after: payloads2, deadTuples: dead2 };
    table.push(
      `| purge(), payloads: ${dropped.length} partitions (${dropped.filter((n) => !n.includes("_before_")).length} weeks${dropped.some((n) => n.includes("_before_")) ? " and the empty `before`" : ""}) counted, detached and dropped | ${payloads?.payloadsDropped} | ${(p.ms / 1000).toFixed(2)} s | ${mib(p.wal)} (${p.wal} B) | webhook_inbox_payloads ${fmtSizes(payloads0)} | ${fmtSizes(payloads2)} | ${dead2} |`,
    );

    // 3. What the key delete leaves: dead tuples, until a VACUUM (autovacuum's, in production) makes their space reusable.
    const v = await measured(db, scratch.url, (own) => own`vacuum webhook_inbox`);
    const state3 = await sizes(db, "webhook_inbox");
    const dead3 = await deadTuples(db);
    say(`  vacuum webhook_inbox: ${JSON.stringify({ ...v, deadTuples: dead3 })}; webhook_inbox ${fmtSizes(state3)}`);
    results.vacuum = { ...v, after: state3, deadTuples: dead3 };
    table.push(
      `| then a plain \`vacuum webhook_inbox\` | — | ${(v.ms / 1000).toFixed(2)} s | ${mib(v.wal)} (${v.wal} B) | webhook_inbox ${fmtSizes(state1)} | ${fmtSizes(state3)} | ${dead3} |`,
    );
    results.after = await contents(db);
  } finally {
    await db.end({ timeout: 5 });
    await scratch.drop();
    scratches.delete(scratch);
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
