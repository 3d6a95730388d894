// Entry file: `bun run worker [options]`: processes async and hybrid rows. Env, args and signals live here.
import { parseArgs } from "node:util";
import { abortOnSignals, loopFlagSpecs, readLoopSettings } from "../runtime/loop-settings.ts";
import { ConfigError, readApiEndpoints, readDatabaseWaitMs, readPooler } from "../config.ts";
import { connect } from "../db/db.ts";
import { handlerTables, handlersFor, migratingHandlersFor } from "../receiver/endpoints.ts";
import { openReadyDatabase } from "../runtime/ready-database.ts";
import { runWorker } from "../worker/worker.ts";
import { readStripeApiSettings, stripeApiClient } from "../stripe-api/client.ts";
import { stripeFetcher, type Fetcher } from "../worker/stripe-fetch.ts";
import { readCatchUpSettings, startBackfillRequests, startCatchUp, type CatchUpSettings } from "../runtime/catch-up.ts";

const USAGE = `Usage: bun run worker [options]   (each option also reads WORKER_<NAME> from the environment)
  --concurrency N     batches processed at once (default 4)
  --batch-size N      rows applied in one transaction, one commit (default 8; 1 = a commit per row)
  --lease-ms N        lease per claim, ms (default 60000)
  --timeout-ms N      time bound of one batch, rows redone alone included, ms, < lease (default 30000)
  --max-attempts N    attempts before needs-review (default 10)
  --poll-ms N         poll interval when no NOTIFY arrives, ms (default 5000)
  --backoff-base-ms N first retry delay, ms, doubling (default 1000)
  --backoff-cap-ms N  longest retry delay, ms (default 600000)
  --no-listen         do not LISTEN; poll only (implied by DATABASE_POOLER=transaction)
  DATABASE_WAIT_MS    how long to wait at start for the database to answer, ms (default 60000; 0 tries once)
  STRIPE_API_KEY, STRIPE_API_BASE   the Stripe API thin endpoints and refetch endpoints are read from
                      (required when STRIPE_ENDPOINT_KIND[_<NAME>]=thin or INBOX_REFETCH[_<NAME>]=true)
  STRIPE_API_REQUESTS_PER_SEC       API requests started per second at most (default 20)
  RECONCILE_IDLE_AFTER, RECONCILE_EVERY   event catch-up from Stripe's Events API (1h, 15m; off by default; needs STRIPE_API_KEY)`;

function usageError(message: string): never {
  console.error(`${message}\n\n${USAGE}`);
  process.exit(2);
}

let parsed;
try {
  parsed = parseArgs({
    options: {
      ...loopFlagSpecs,
      "batch-size": { type: "string" },
      "no-listen": { type: "boolean", default: false },
      help: { type: "boolean", short: "h", default: false },
    },
  });
} catch (err) {
  usageError(err instanceof Error ? err.message : String(err));
}
if (parsed.values.help) {
  console.log(USAGE);
  process.exit(0);
}
const problems: string[] = [];
const settings = readLoopSettings(parsed.values, process.env, "WORKER", problems);
const rawBatch = parsed.values["batch-size"] ?? process.env.WORKER_BATCH_SIZE ?? "8";
const batchSize = Number(rawBatch);
if (!/^\d+$/.test(rawBatch) || !Number.isSafeInteger(batchSize) || batchSize < 1)
  problems.push(`--batch-size (WORKER_BATCH_SIZE) must be a whole number ≥ 1, got "${rawBatch}"`);
const waitMs = readDatabaseWaitMs(process.env, problems);
const apiEndpoints = readApiEndpoints(process.env, problems);
const fetcher = readFetcher(problems);
let catchUpSettings: CatchUpSettings = { idleAfterMs: undefined, everyMs: undefined };
try {
  catchUpSettings = readCatchUpSettings(process.env);
} catch (err) {
  if (!(err instanceof ConfigError)) throw err;
  problems.push(...err.problems);
}
if (problems[0]) usageError(problems.join("\n"));

/**
 * The worker's Stripe API reader: required when a thin or refetch endpoint is configured, built whenever
 * STRIPE_API_KEY is set (thin rows recorded earlier still need it). Appends problems.
 */
function readFetcher(problems: string[]): Fetcher | undefined {
  const needed = apiEndpoints.thin.size > 0 || apiEndpoints.refetch.size > 0;
  if (!needed && !process.env.STRIPE_API_KEY) return undefined;
  const rawRate = process.env.STRIPE_API_REQUESTS_PER_SEC || "20";
  const rate = Number(rawRate);
  if (!/^\d+$/.test(rawRate) || rate < 1) problems.push(`STRIPE_API_REQUESTS_PER_SEC must be a whole number ≥ 1, got "${rawRate}"`);
  try {
    const api = readStripeApiSettings(process.env);
    return stripeFetcher({
      stripe: stripeApiClient(api),
      refetchEndpoints: apiEndpoints.refetch,
      requestsPerSecond: rate,
      handledTypes: new Set(Object.keys(handlerTables.stripe)),
    });
  } catch (err) {
    const listed = (err as { problems?: string[] }).problems ?? [String(err)];
    problems.push(
      ...listed.map(
        (p) =>
          `${p} (thin endpoints: ${[...apiEndpoints.thin].join(", ") || "none"}; refetch: ${[...apiEndpoints.refetch].join(", ") || "none"})`,
      ),
    );
    return undefined;
  }
}
const poolerProblems: string[] = [];
const pooler = readPooler(process.env, poolerProblems);
if (poolerProblems[0]) usageError(poolerProblems[0]);
// A transaction pooler hands each transaction any server connection: a LISTEN would be registered on a
// connection we do not keep, so notifications never arrive. Poll only there.
const listen = !parsed.values["no-listen"] && pooler !== "transaction";

// Signals before the database is opened: a stop during start-up must also stop an embedded server.
const controller = abortOnSignals("worker");
const ready = await openReadyDatabase({
  command: "webhook-inbox worker",
  env: process.env,
  // A server-side bound as well as the worker's own: statements of a worker killed mid-wait end by themselves.
  // A pooler that refuses the startup parameter (PgBouncer, even in session mode) gets none: transactions
  // still set it locally, single statements keep the client-side cancel.
  connect: (url, startupParameters) =>
    connect(url, {
      max: settings.concurrency + 1,
      applicationName: "webhook-inbox worker",
      pooler,
      statementTimeoutMs: startupParameters ? settings["timeout-ms"] : undefined,
    }),
  signal: controller.signal,
  waitMs,
  pooler,
});
if (!ready) {
  console.log(JSON.stringify({ worker: "stopped" }));
  process.exit(0);
}
const { database, db } = ready;

// "session": every statement bounded by the server; "transaction": only statements inside transactions.
const statementTimeout = pooler !== "transaction" && ready.startupParameters ? "session" : "transaction";
console.log(
  JSON.stringify({
    worker: "started",
    database: database.embedded ? "embedded" : "DATABASE_URL",
    pooler,
    listen,
    ...settings,
    "batch-size": batchSize,
    "statement-timeout": statementTimeout,
  }),
);
// Event backfill after downtime and on a schedule (RECONCILE_IDLE_AFTER, RECONCILE_EVERY), when turned on.
let catchUp: Promise<void> | undefined;
// Backfill requests recorded by health notifications of thin endpoints, served here (the worker holds
// the API key thin endpoints need); woken as the worker records one, polled otherwise.
let backfillRequests: Promise<void> | undefined;
let wakeBackfill = (): void => {};
const backfillWoken = () => new Promise<void>((resolve) => (wakeBackfill = resolve));
try {
  catchUp = startCatchUp(process.env, catchUpSettings, db, controller.signal, (line) => console.log(JSON.stringify(line)));
  if (fetcher)
    backfillRequests = startBackfillRequests(
      process.env,
      db,
      controller.signal,
      (line) => console.log(JSON.stringify(line)),
      backfillWoken,
    );
} catch (err) {
  console.error(err instanceof ConfigError ? err.message : err);
  process.exit(2);
}
await runWorker({
  db,
  // Next to thin endpoints, classic rows claim their change like the receiver's classic endpoints then do.
  handlersFor: apiEndpoints.thin.size > 0 ? migratingHandlersFor : handlersFor,
  signal: controller.signal,
  concurrency: settings.concurrency,
  batchSize,
  leaseMs: settings["lease-ms"],
  timeoutMs: settings["timeout-ms"],
  maxAttempts: settings["max-attempts"],
  pollMs: settings["poll-ms"],
  backoff: { baseMs: settings["backoff-base-ms"], capMs: settings["backoff-cap-ms"] },
  listen,
  ...(fetcher ? { fetcher } : {}),
  // Served by startBackfillRequests above (event_backfill_requests, sql/0015_thin_events.sql).
  onBackfillRequested: (r) => {
    console.log(JSON.stringify({ worker: "backfill_requested", id: r.id, endpoint: r.endpoint, from: r.window.start, to: r.window.end }));
    wakeBackfill();
  },
});
await catchUp;
await backfillRequests;
await db.end({ timeout: 5 });
await database.close();
console.log(JSON.stringify({ worker: "stopped" }));
process.exit(0);
