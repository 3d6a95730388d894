// Entry file: `bun run bench:claim [--runs N] [--drains N] [--before-ref REF]`. The worker's claim
// statement (src/worker/claim.ts claimBatch) of this tree against an older commit's, each on its own schema
// in a scratch database: how long one claim of 128 rows takes (4 slots × batches of 32) and what it takes,
// on backlogs shaped like the cases the fair claim is for. Claims alternate between the two trees; after
// each the claimed rows are put back (attempts 0, due as before), outside the time measured. Then this
// tree's worker (its defaults) drains 10,000 events of one account alone: the platform's own (not bounded)
// against a connected account's (held at most --account-max at once). On a throwaway embedded PostgreSQL
// 18, or scratch databases on DATABASE_URL's server. docs/performance.md, "Fair claims between connected
// accounts", gives the figures.
import { rmSync } from "node:fs";
import { dirname, join } from "node:path";
import { benchArgs } from "../bench/bench-args.ts";
import { connect, type Db } from "../../db/db.ts";
import { migrate } from "../../db/migrate.ts";
import type { claimBatch as ClaimBatch } from "../../worker/claim.ts";
import { DEFAULT_BATCH, defaultAccountMax, runWorker } from "../../worker/worker.ts";
import { insertInbox } from "../../inbox/inbox.ts";
import { handlerTables } from "../../receiver/endpoints.ts";
import { benchEventBody } from "../bench/payload.ts";
import { startEmbeddedPostgres, temporaryDataDir, type EmbeddedServer } from "../../runtime/embedded-postgres.ts";
import { loadMigrations } from "../../runtime/migrations-fs.ts";
import { extractBeforeTree } from "../bench/before-tree.ts";
import { createScratchDatabase, type ScratchDatabase } from "../scratch-database.ts";

const USAGE = `Usage: bun run bench:claim [--runs N] [--drains N] [--before-ref REF]
  one claim of 128 rows (claimBatch, 4 slots × 32), this tree's against REF's, alternating, on three
  backlogs: one account's 10,000 rows; one account's 10,000 and nine accounts' one row each; 200 accounts'
  50 rows each. Prints the median and 95th percentile time of a claim, and what it took. Then this tree's
  worker drains 10,000 events of the platform alone and of one connected account alone, alternating
  --runs N          claims per tree and backlog (default 200)
  --drains N        drains of each (default 3; 0: none)
  --before-ref REF  the code to compare with (default: the parent of the commit that added the fair claim)`;

const args = benchArgs("bench:claim", USAGE, {
  runs: { type: "string" },
  drains: { type: "string" },
  "before-ref": { type: "string" },
});
const o = args.values;
const runs = args.whole("runs", o.runs, 200);
const drains = args.whole("drains", o.drains, 3, 0);
const ROOT = join(import.meta.dir, "..", "..", "..");
const LIMIT = 128;

/** A backlog: `accounts` of `rows` each (queued in that order, one statement per account, so each is its own due time). */
interface Backlog {
  name: string;
  accounts: { account: string; rows: number }[];
}
const BACKLOGS: Backlog[] = [
  { name: "one account, 10,000 rows", accounts: [{ account: "", rows: 10_000 }] },
  {
    name: "one account 10,000 rows, nine 1 row each",
    accounts: [
      { account: "acct_flood", rows: 10_000 },
      ...Array.from({ length: 9 }, (_, i) => ({ account: `acct_trickle_${i + 1}`, rows: 1 })),
    ],
  },
  { name: "200 accounts, 50 rows each", accounts: Array.from({ length: 200 }, (_, i) => ({ account: `acct_many_${i}`, rows: 50 })) },
];

async function fill(db: Db, backlog: Backlog): Promise<void> {
  await db`truncate webhook_inbox, webhook_inbox_payloads`;
  for (const [i, { account, rows }] of backlog.accounts.entries()) {
    await db`
      with s as (
        insert into webhook_inbox (provider, endpoint, event_id, event_type, account, received_at, available_at)
        select 'stripe', 'billing', 'evt_claim_' || ${i}::int || '_' || g, 'invoice.paid', ${account},
               now() - interval '1 hour' + ${i}::int * interval '1 ms', now() - interval '1 hour' + ${i}::int * interval '1 ms'
          from generate_series(1, ${rows}::int) g
        returning provider, endpoint, event_id, received_at
      )
      insert into webhook_inbox_payloads (provider, endpoint, event_id, received_at, payload)
      select provider, endpoint, event_id, received_at, '{"data":{"object":{"id":"in_1"}}}'::jsonb from s
    `;
  }
  await db`vacuum analyze webhook_inbox`;
}

/** One claim on `db` with `claim`: its time in ms, the rows and accounts it took, then the rows put back. */
async function claimOnce(db: Db, claim: typeof ClaimBatch) {
  const t0 = performance.now();
  const rows = await claim(db, { limit: LIMIT, leaseMs: 60_000, maxAttempts: 10 });
  const ms = performance.now() - t0;
  await db`update webhook_inbox set attempts = 0, available_at = received_at where attempts > 0`;
  return { ms, rows: rows.length, accounts: new Set(rows.map((r) => r.account)).size };
}

/** Queues 10,000 invoice.paid events of `account` (each its own invoice: src/dev/bench/payload.ts) on empty tables. */
async function queueInvoices(db: Db, account: string, run: string): Promise<void> {
  await db`truncate webhook_inbox, webhook_inbox_payloads, outbox, ledger_entries, invoices`;
  for (let k = 0; k < 10; k++) {
    const rows = Array.from({ length: 1_000 }, (_, i) => {
      const eventId = `evt_bench_${run}_${k * 1_000 + i}`;
      const payload = benchEventBody(run, k * 1_000 + i);
      return {
        key: { provider: "stripe", endpoint: "billing", eventId },
        type: "invoice.paid",
        payload,
        rawBody: null,
        replaced: null,
        source: "webhook" as const,
        createdAtSec: null,
        account,
        livemode: null,
        settled: null,
        traceparent: null,
      };
    });
    await insertInbox(db, rows);
  }
  await db`vacuum analyze webhook_inbox`;
}

/**
 * Drains the queued backlog at `url` with this tree's runWorker and its defaults (a pool of 5, no LISTEN,
 * a 20 ms poll) and the shipped Stripe handlers: events per second from its start until every row was
 * processed.
 */
async function drainAlone(url: string): Promise<number> {
  const pool = connect(url, { max: 5, applicationName: "webhook-inbox bench:claim worker" });
  const controller = new AbortController();
  const total = 10_000;
  let settled = 0;
  let done!: () => void;
  const all = new Promise<void>((resolve) => (done = resolve));
  const t0 = performance.now();
  const worker = runWorker({
    db: pool,
    tables: { stripe: handlerTables.stripe },
    signal: controller.signal,
    listen: false,
    pollMs: 20,
    log: (line) => void (line.outcome === "processed" && ++settled === total && done()),
  });
  await all;
  const rate = total / ((performance.now() - t0) / 1000);
  controller.abort();
  await worker;
  await pool.end({ timeout: 5 });
  return rate;
}

const quantile = (xs: number[], q: number) => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor(q * xs.length))]!;

let embedded: EmbeddedServer | undefined;
let dataDir: string | undefined;
const scratches: ScratchDatabase[] = [];
const before = extractBeforeTree(ROOT, o["before-ref"], "test/worker/fairness.test.ts");
try {
  let serverUrl = process.env.DATABASE_URL;
  if (!serverUrl) {
    dataDir = await temporaryDataDir();
    embedded = await startEmbeddedPostgres({ dir: dataDir, port: 0 });
    serverUrl = embedded.url;
  }
  const trees = [] as { name: string; db: Db; claim: typeof ClaimBatch }[];
  for (const [name, root] of [
    [`before (${before.commit})`, before.dir],
    ["after (this tree)", ROOT],
  ] as const) {
    const scratch = await createScratchDatabase(serverUrl, `webhook_inbox_bench_claim_${trees.length}`);
    scratches.push(scratch);
    const db = connect(scratch.url, { max: 1, applicationName: "webhook-inbox bench:claim" });
    await migrate(db, loadMigrations(join(root, "sql")));
    const { claimBatch } = (await import(join(root, "src", "worker", "claim.ts"))) as { claimBatch: typeof ClaimBatch };
    trees.push({ name, db, claim: claimBatch });
  }
  console.log(`| backlog | code | claim ms, median | p95 | rows taken | accounts in it |`);
  console.log(`|---|---|---|---|---|---|`);
  for (const backlog of BACKLOGS) {
    for (const t of trees) await fill(t.db, backlog);
    const seen = new Map(trees.map((t) => [t, [] as Awaited<ReturnType<typeof claimOnce>>[]]));
    for (let r = 0; r < runs; r++)
      for (const t of r % 2 === 0 ? trees : [...trees].reverse()) seen.get(t)!.push(await claimOnce(t.db, t.claim));
    for (const t of trees) {
      const s = seen.get(t)!;
      const ms = s.map((x) => x.ms);
      console.log(
        `| ${backlog.name} | ${t.name} | ${quantile(ms, 0.5).toFixed(2)} | ${quantile(ms, 0.95).toFixed(2)} | ${s[0]!.rows} | ${s[0]!.accounts} |`,
      );
    }
  }
  // One account alone on this tree's worker (its defaults), the platform's rows against a connected account's.
  const mine = trees[1]!;
  const rates = new Map<string, number[]>([
    ["", []],
    ["acct_alone", []],
  ]);
  for (let r = 0; r < drains; r++)
    for (const account of r % 2 === 0 ? ["", "acct_alone"] : ["acct_alone", ""]) {
      await queueInvoices(mine.db, account, `d${r}${account}`);
      rates.get(account)!.push(await drainAlone(scratches[1]!.url));
    }
  if (drains > 0) {
    console.log(`\n| one account alone, 10,000 events | worker drain, events/s, median (min–max of ${drains}) |\n|---|---|`);
    for (const [account, rs] of rates)
      console.log(
        `| ${account === "" ? "the platform's own (not bounded)" : `a connected account (held at most ${defaultAccountMax(4, DEFAULT_BATCH)})`} | ${Math.round(quantile(rs, 0.5))} (${Math.round(Math.min(...rs))}–${Math.round(Math.max(...rs))}) |`,
      );
  }
  for (const t of trees) await t.db.end({ timeout: 5 });
} finally {
  for (const s of scratches) await s.drop().catch(() => {});
  before.remove();
  await embedded?.stop();
  if (dataDir) rmSync(dirname(dataDir), { recursive: true, force: true });
}
