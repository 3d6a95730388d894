// Entry file: `bun run worker [options]`: processes async and hybrid rows. Env, args and signals live here.
import { flushTelemetry, loadTelemetry } from "../runtime/telemetry.ts";
import { loopLog, openLoopDatabase, parseLoopArgs, readLoopSettings } from "../runtime/loop-settings.ts";
import { ConfigError, loadEndpointsWithoutSecrets, readApiEndpoints, readDatabaseWaitMs, readPooler } from "../config.ts";
import { workerHandlerTables } from "../receiver/endpoints.ts";
import { DEFAULT_BATCH, defaultAccountMax, runWorker } from "../worker/worker.ts";
import { MAX_BATCH } from "../worker/process-batch.ts";
import { checkStripeApiKey, readStripeApiSettings, stripeApiClient } from "../stripe-api/client.ts";
import { stripeFetcher, type Fetcher } from "../worker/stripe-fetch.ts";
import { readCatchUpSettings, startBackfillRequests, startCatchUp, type CatchUpSettings } from "../runtime/catch-up.ts";
import { readFailoverSettings, startFailoverWatch, type FailoverSettings } from "../runtime/failover.ts";
import { hostname } from "node:os";

const USAGE = `Usage: bun run worker [options]   (each option also reads WORKER_<NAME> from the environment)
  --concurrency N     slots: transactions at once (default 4)
  --batch N           rows per slot's transaction, one savepoint each, 1 to 64 (default 32); rows already
                      tried, thin and refetch rows are each processed alone
  --account-max N     rows of one connected account held at once, so a noisy account leaves the rest to the
                      others (default half of concurrency × batch, at least one batch; the platform's own
                      events are not bounded; concurrency × batch or more: no bound)
  --lease-ms N        lease per claimed row, ms (default 60000)
  --timeout-ms N      bound of a slot's transaction (PostgreSQL statement_timeout; a batch's events share it), ms, < lease;
                      a thin or refetch row's Stripe API read must end within lease − timeout (default 30000)
  --max-attempts N    attempts before needs-review (default 10)
  --poll-ms N         poll interval when no NOTIFY arrives, ms (default 5000)
  --backoff-base-ms N first retry delay, ms, doubling (default 1000)
  --backoff-cap-ms N  longest retry delay, ms (default 600000)
  --heartbeat-ms N    how often its heartbeat row is written, ms; 3 missed beats read as dead (default 10000)
  --no-listen         do not LISTEN; poll only (implied by DATABASE_POOLER=transaction)
  DATABASE_WAIT_MS    how long to wait at start for the database to answer, ms (default 60000; 0 tries once)
  STRIPE_API_KEY, STRIPE_API_BASE   the Stripe API thin endpoints and refetch endpoints are read from
                      (required when STRIPE_ENDPOINT_KIND[_<NAME>]=thin or INBOX_REFETCH[_<NAME>]=true)
  STRIPE_API_REQUESTS_PER_SEC       API requests started per second at most (default 20)
  RECONCILE_IDLE_AFTER, RECONCILE_EVERY   event catch-up from Stripe's Events API (1h, 15m; off by default; needs STRIPE_API_KEY)
  FAILOVER_CHECK_MS, FAILOVER_BACKFILL_MARGIN  primary-change watch (default 5000 ms, 0 off) and its backfill margin (default 1h)`;

function usageError(message: string): never {
  console.error(`${message}\n\n${USAGE}`);
  process.exit(2);
}

const flags = parseLoopArgs(USAGE, { batch: { type: "string" }, "account-max": { type: "string" } }, usageError);
const problems: string[] = [];
const settings = readLoopSettings(flags, process.env, "WORKER", problems);
const batch = readBatch(flags.batch ?? process.env.WORKER_BATCH, problems);
const accountMax = readAccountMax(flags["account-max"] ?? process.env.WORKER_ACCOUNT_MAX, problems);
const waitMs = readDatabaseWaitMs(process.env, problems);
const apiEndpoints = readApiEndpoints(process.env, problems);
const api = readFetcher(problems);
let catchUpSettings: CatchUpSettings = { idleAfterMs: undefined, everyMs: undefined };
let failoverSettings: FailoverSettings = { checkEveryMs: 0, marginMs: 0 };
try {
  catchUpSettings = readCatchUpSettings(process.env);
  failoverSettings = readFailoverSettings(process.env);
  // The endpoints' settings (STRIPE_MODE, STRIPE_CONNECT, kinds) are read again by the catch-up and the
  // failover watch after the start: checked here, so a bad value stops the worker before it says started.
  loadEndpointsWithoutSecrets(process.env);
} catch (err) {
  if (!(err instanceof ConfigError)) throw err;
  problems.push(...err.problems);
}
if (problems[0]) usageError(problems.join("\n"));

/** `--batch` (WORKER_BATCH): a whole number from 1 to MAX_BATCH, default DEFAULT_BATCH. Appends a problem naming both otherwise. */
function readBatch(raw: string | boolean | undefined, problems: string[]): number {
  if (raw === undefined) return DEFAULT_BATCH;
  const n = Number(raw);
  if (/^\d+$/.test(String(raw)) && n >= 1 && n <= MAX_BATCH) return n;
  problems.push(`--batch (WORKER_BATCH) must be a whole number from 1 to ${MAX_BATCH}, got "${String(raw)}"`);
  return DEFAULT_BATCH;
}

/** `--account-max` (WORKER_ACCOUNT_MAX): a whole number ≥ 1, default {@link defaultAccountMax}. Appends a problem otherwise. */
function readAccountMax(raw: string | boolean | undefined, problems: string[]): number {
  if (raw === undefined) return defaultAccountMax(settings.concurrency, batch);
  if (/^\d+$/.test(String(raw)) && Number(raw) >= 1) return Number(raw);
  problems.push(`--account-max (WORKER_ACCOUNT_MAX) must be a whole number ≥ 1, got "${String(raw)}"`);
  return 1;
}

/**
 * The worker's Stripe API reader: required when a thin or refetch endpoint is configured, built whenever
 * STRIPE_API_KEY is set (thin rows recorded earlier still need it). Appends problems.
 */
function readFetcher(problems: string[]): { fetcher: Fetcher; stripe: ReturnType<typeof stripeApiClient>; apiBase: URL } | undefined {
  const needed = apiEndpoints.thin.size > 0 || apiEndpoints.refetch.size > 0;
  if (!needed && !process.env.STRIPE_API_KEY) return undefined;
  const rawRate = process.env.STRIPE_API_REQUESTS_PER_SEC || "20";
  const rate = Number(rawRate);
  if (!/^\d+$/.test(rawRate) || rate < 1) problems.push(`STRIPE_API_REQUESTS_PER_SEC must be a whole number ≥ 1, got "${rawRate}"`);
  try {
    const settings = readStripeApiSettings(process.env);
    const stripe = stripeApiClient(settings);
    return {
      stripe,
      apiBase: settings.apiBase,
      fetcher: stripeFetcher({ stripe, refetchEndpoints: apiEndpoints.refetch, requestsPerSecond: rate, apiBase: settings.apiBase }),
    };
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
const log = loopLog(usageError);
// A transaction pooler hands each transaction any server connection: a LISTEN would be registered on a
// connection we do not keep, so notifications never arrive. Poll only there.
const listen = !flags["no-listen"] && pooler !== "transaction";
const { database, db, controller } = await openLoopDatabase("worker", "webhook-inbox worker", settings, waitMs, pooler, log);

// A wrong or revoked key is one clear line at start, not every thin row parked one by one. An API that
// cannot be reached is one line too, and the worker starts: rows that need it wait and are retried.
if (api) {
  const problem = await checkStripeApiKey(api.stripe, api.apiBase);
  if (problem?.fatal) {
    console.error(`Cannot start webhook-inbox worker: ${problem.message}`);
    await db.end({ timeout: 1 });
    process.exit(1);
  }
  if (problem)
    console.error(`webhook-inbox worker: ${problem.message}; starting anyway: rows that need the Stripe API wait and are retried`);
}
log({
  worker: "started",
  database: database.embedded ? "embedded" : "DATABASE_URL",
  pooler,
  listen,
  ...settings,
  batch,
  "account-max": accountMax,
  "stripe-api": api ? "configured" : "none (thin rows are left to a worker that has it)",
});
// Event backfill after downtime and on a schedule (RECONCILE_IDLE_AFTER, RECONCILE_EVERY), when turned on.
let catchUp: Promise<void> | undefined;
// Backfill requests recorded by health notifications of thin endpoints, served here (the worker holds
// the API key thin endpoints need), polled every 30 s.
// OpenTelemetry when `@opentelemetry/api` is installed (an SDK registered by a --preload file exports).
const telemetry = await loadTelemetry(process.env);
let backfillRequests: Promise<void> | undefined;
// A primary that changed (failover) is noticed and what it may have lost is backfilled (docs/failover.md).
let failoverWatch: Promise<void> | undefined;
try {
  catchUp = startCatchUp(process.env, catchUpSettings, db, controller.signal, log, telemetry);
  if (api) backfillRequests = startBackfillRequests(process.env, db, controller.signal, log);
  failoverWatch = startFailoverWatch(process.env, failoverSettings, catchUpSettings, db, controller.signal, log);
} catch (err) {
  console.error(err instanceof ConfigError ? err.message : err);
  process.exit(2);
}
await runWorker({
  db,
  // Next to thin endpoints, classic rows claim their change like the receiver's classic endpoints then do.
  tables: workerHandlerTables(apiEndpoints.thin.size > 0),
  signal: controller.signal,
  concurrency: settings.concurrency,
  batch,
  accountMax,
  leaseMs: settings["lease-ms"],
  timeoutMs: settings["timeout-ms"],
  maxAttempts: settings["max-attempts"],
  pollMs: settings["poll-ms"],
  backoff: { baseMs: settings["backoff-base-ms"], capMs: settings["backoff-cap-ms"] },
  listen,
  ...(api ? { fetcher: api.fetcher } : {}),
  telemetry,
  log,
  heartbeat: {
    host: hostname(),
    pid: process.pid,
    everyMs: settings["heartbeat-ms"],
    detail: `${settings.concurrency} slot(s), batch ${batch}`,
  },
});
await catchUp;
await backfillRequests;
await failoverWatch;
await db.end({ timeout: 5 });
log({ worker: "stopped" });
await flushTelemetry(telemetry);
process.exit(0);
