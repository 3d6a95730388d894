// Entry file: `bun run bench:health [--rows N] [--runs N] [--clients N] [--deliveries N]`. What 30 days of
// health costs (docs/scale.md, "Health over 30 days"): N state rows received over the last 30 days at four
// endpoints (sync and async, quick and late settles, retries, parked and waiting rows; no payloads: retention
// drops them, the state rows stay), then, each run timed, the plain 30-day aggregate a page would run
// without a rollup, the rollup's first fill of 720 hours, one hour's fill (the steady state), the page's
// read (src/ops/health.ts readHealth) and the scrape's (/metrics: 7 days). Last, what the other design
// would cost every delivery: concurrent sync-style inserts alone and with an hourly counter upserted in the
// same transaction. On a throwaway embedded PostgreSQL 18 (or a scratch database on DATABASE_URL's server).
import { rmSync } from "node:fs";
import { dirname } from "node:path";
import { loadavg } from "node:os";
import { benchArgs } from "../bench/bench-args.ts";
import { connect, type Db } from "../../db/db.ts";
import { migrate } from "../../db/migrate.ts";
import { arrivalGaps, fillInboxHours, readInboxHours } from "../../inbox/hours.ts";
import { readHealth } from "../../ops/health.ts";
import { startEmbeddedPostgres, temporaryDataDir, type EmbeddedServer } from "../../runtime/embedded-postgres.ts";
import { loadMigrations } from "../../runtime/migrations-fs.ts";
import { onStopSignals } from "../../runtime/signals.ts";
import { createScratchDatabase, type ScratchDatabase } from "../scratch-database.ts";

const USAGE = `Usage: bun run bench:health [--rows N] [--runs N] [--clients N] [--deliveries N]
  --rows N        state rows over the last 30 days (default 2000000)
  --runs N        timed runs of each read (default 3)
  --clients N     concurrent clients of the delivery-path comparison (default 8)
  --deliveries N  inserts per client in that comparison (default 500)`;

const args = benchArgs("bench:health", USAGE, {
  rows: { type: "string" },
  runs: { type: "string" },
  clients: { type: "string" },
  deliveries: { type: "string" },
});
const o = args.values;
const rows = args.whole("rows", o.rows, 2_000_000);
const runs = args.whole("runs", o.runs, 3);
const clients = args.whole("clients", o.clients, 8);
const deliveries = args.whole("deliveries", o.deliveries, 500);
const say = (line: string) => console.log(`${new Date().toISOString().slice(11, 19)} ${line}`);

let embedded: EmbeddedServer | undefined;
let dataDir: string | undefined;
let scratch: ScratchDatabase | undefined;
onStopSignals(
  (signal) => {
    console.error(`bench:health: ${signal}: stopping`);
    void (async () => {
      await scratch?.drop().catch(() => {});
      await embedded?.stop().catch(() => {});
      if (dataDir) rmSync(dirname(dataDir), { recursive: true, force: true });
      process.exit(signal === "SIGINT" ? 130 : 143);
    })();
  },
  () => process.exit(1),
);

/**
 * `rows` state rows received evenly over the 30 days before now: 60 % at `billing` (sync: settled as
 * received), 30 % at `payments` (async: settled 0–2.5 s later), 8 % at `repos` (GitHub), 2 % at `paddle`;
 * per thousand 5 parked, 3 resolved an hour later, 12 retried (3 attempts, 30 s), 40 ignored, and the async
 * rows of the last 10 minutes partly still waiting.
 */
async function fill(db: Db): Promise<void> {
  const chunk = 200_000;
  for (let lo = 1; lo <= rows; lo += chunk) {
    const hi = Math.min(rows, lo + chunk - 1);
    await db.unsafe(`
      insert into webhook_inbox (provider, endpoint, event_id, event_type, received_at, available_at, attempts, processed_at, outcome,
                                 needs_review_at, last_error, resolution_note)
      select e.provider, e.endpoint, 'evt_health_' || g, 'invoice.paid', r, r,
             case when k < 8 then 10 when k < 20 then 3 else e.lat end,
             case when k < 5 or waiting then null when k < 8 then r + interval '1 hour' when k < 20 then r + interval '30 s'
                  else r + e.lat * (k % 50) * interval '50 ms' end,
             case when k < 5 or waiting then null when k < 8 then 'resolved' when k < 60 then 'ignored' else 'processed' end,
             case when k < 5 then r + interval '1 minute' end,
             case when k < 8 then 'Error: refused' end,
             case when k >= 5 and k < 8 then 'settled by hand' end
        from generate_series(${lo}::bigint, ${hi}::bigint) g,
             lateral (select now() - (${rows} - g)::float8 / ${rows} * interval '30 days' as r, (g * 7919) % 1000 as k) x,
             lateral (select case when g % 100 < 90 then 'stripe' when g % 100 < 98 then 'github' else 'paddle' end as provider,
                             case when g % 100 < 60 then 'billing' when g % 100 < 90 then 'payments' when g % 100 < 98 then 'repos' else 'paddle' end as endpoint,
                             case when g % 100 < 60 then 0 else 1 end as lat) e,
             lateral (select e.lat = 1 and r > now() - interval '10 minutes' and k % 3 = 0 and k >= 20 as waiting) w`);
    say(`  filled ${hi} rows`);
  }
  await db`vacuum (analyze) webhook_inbox`;
}

/** The 30-day aggregate a page would run on every load without the rollup (one scan of the window's rows). */
const plainScan = (db: Db) => db`
  select provider, endpoint, date_trunc('day', received_at, 'UTC') as day, count(*) as received,
         count(*) filter (where attempts > 1 or outcome = 'resolved' or needs_review_at is not null) as failed,
         count(*) filter (where needs_review_at is not null or outcome = 'resolved') as needs_review,
         percentile_disc(0.95) within group (order by processed_at - received_at) filter (where outcome = 'processed') as p95
    from webhook_inbox
   where received_at >= date_trunc('day', now(), 'UTC') - interval '29 days'
   group by 1, 2, 3
`;

/** Median and range of `runs` runs of `fn`, ms. */
async function timed(fn: () => Promise<unknown>, n = runs): Promise<string> {
  const times: number[] = [];
  for (let i = 0; i < n; i++) {
    const t0 = performance.now();
    await fn();
    times.push(performance.now() - t0);
  }
  times.sort((a, b) => a - b);
  const median = times[Math.floor(times.length / 2)]!;
  return `${median.toFixed(0)} ms (${times.map((t) => t.toFixed(0)).join(", ")})`;
}

/**
 * Deliveries per second of `clients` connections each committing `deliveries` transactions of one inbox
 * insert, with or without an hourly counter upserted in the same transaction (the rollup the page would
 * otherwise need: every delivery of an endpoint and hour updates one row, so concurrent ones wait for it).
 */
async function deliveryPath(url: string, withCounter: boolean, tag: string): Promise<number> {
  const pools = Array.from({ length: clients }, () => connect(url, { max: 1 }));
  await Promise.all(pools.map((p) => p`select 1`));
  const t0 = performance.now();
  await Promise.all(
    pools.map(async (p, c) => {
      for (let i = 0; i < deliveries; i++)
        await p.begin(async (tx) => {
          await tx`
            insert into webhook_inbox (provider, endpoint, event_id, event_type, processed_at, outcome)
            values ('stripe', 'billing', ${`evt_path_${tag}_${c}_${i}`}, 'invoice.paid', now(), 'processed')
          `;
          if (withCounter)
            await tx`
              insert into bench_hour_counters (provider, endpoint, hour, received)
              values ('stripe', 'billing', date_trunc('hour', now(), 'UTC'), 1)
              on conflict (provider, endpoint, hour) do update set received = bench_hour_counters.received + 1
            `;
        });
    }),
  );
  const seconds = (performance.now() - t0) / 1000;
  await Promise.all(pools.map((p) => p.end({ timeout: 5 })));
  return (clients * deliveries) / seconds;
}

let exitCode = 0;
try {
  let serverUrl = process.env.DATABASE_URL;
  if (!serverUrl) {
    dataDir = await temporaryDataDir("webhook-inbox-health-pg-");
    embedded = await startEmbeddedPostgres({ dir: dataDir, port: 0, flags: ["-c", "max_wal_size=4GB"] });
    serverUrl = embedded.url;
  }
  scratch = await createScratchDatabase(serverUrl, "bench_health");
  const db = connect(scratch.url, { max: 2, applicationName: "webhook-inbox bench:health" });
  await migrate(db, loadMigrations());
  say(`filling ${rows} state rows over 30 days`);
  await fill(db);
  const [size] = await db<{ size: string }[]>`select pg_size_pretty(pg_total_relation_size('webhook_inbox')) as size`;
  say(`webhook_inbox: ${size?.size}`);
  const results: [string, string][] = [];
  results.push(["plain 30-day aggregate (every page load without a rollup)", await timed(() => plainScan(db))]);
  // After an upgrade the page computes 24 hours a load (and every scrape one): 30 such fills cover 30 days.
  const calls: number[] = [];
  for (;;) {
    const t0 = performance.now();
    if ((await fillInboxHours(db, { maxHours: 24, statementTimeoutMs: 600_000 })) === 0) break;
    calls.push(performance.now() - t0);
  }
  const sum = calls.reduce((a, b) => a + b, 0);
  results.push([
    `rollup: first fill of 720 hours, 24 a call as page loads do (once, after the upgrade)`,
    `${calls.length} calls, ${sum.toFixed(0)} ms in all, longest call ${Math.max(...calls).toFixed(0)} ms`,
  ]);
  await db`delete from webhook_inbox_hours_filled where hour = (select max(hour) from webhook_inbox_hours_filled)`;
  results.push(["rollup: one new hour's fill (once an hour)", await timed(() => fillInboxHours(db, { maxHours: 1 }), 1)]);
  results.push(["page read: readHealth, 30 days, nothing to fill", await timed(() => readHealth(db, [], { fillHours: 0 }))]);
  results.push(["scrape read: 7 days, arrival gaps", await timed(async () => arrivalGaps(await readInboxHours(db, 7)))]);
  await db`create table bench_hour_counters (provider text, endpoint text, hour timestamptz, received integer, primary key (provider, endpoint, hour))`;
  const alone = await deliveryPath(scratch.url, false, "a");
  const counted = await deliveryPath(scratch.url, true, "b");
  results.push([`delivery path, ${clients} clients × ${deliveries}: inbox insert alone`, `${alone.toFixed(0)} transactions/s`]);
  results.push([
    `delivery path, ${clients} clients × ${deliveries}: with an hourly counter upsert`,
    `${counted.toFixed(0)} transactions/s (${((counted / alone) * 100).toFixed(0)} %)`,
  ]);
  await db.end({ timeout: 5 });
  const load = loadavg()
    .map((l) => l.toFixed(1))
    .join(", ");
  console.log(`\n| ${rows.toLocaleString("en")} state rows, 30 days (load average at the end ${load}) | median (each run) |\n|---|---|`);
  for (const [what, figure] of results) console.log(`| ${what} | ${figure} |`);
} catch (err) {
  console.error(`bench:health: ${err instanceof Error ? err.message : String(err)}`);
  exitCode = 1;
} finally {
  await scratch?.drop().catch(() => {});
  await embedded?.stop().catch(() => {});
  if (dataDir) rmSync(dirname(dataDir), { recursive: true, force: true });
}
process.exit(exitCode);
