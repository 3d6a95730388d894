// Wiring shared by every entry file (Bun, Deno, Node, workerd): settings → pool → the one core fetch.
// Portable on purpose: Web APIs, postgres.js and the core only; no file system, signals or servers.
import { createApp, type App } from "../receiver/app.ts";
import type { Telemetry } from "../telemetry.ts";
import type { LogFn } from "../log.ts";
import { createBodyBudget } from "../receiver/body-budget.ts";
import { ConfigError, loadConfig, PRODUCTION_NEEDS_DATABASE_URL, type Config } from "../config.ts";
import { connect, type DatabaseTls, type Db } from "../db/db.ts";
import { schemaAtStart, type Migration } from "../db/migrate.ts";
import { ensurePartitions } from "../inbox/partitions.ts";
import { hiddenPoolerProblem } from "../db/pooler-check.ts";
import { waitForDatabase } from "../db/wait-for-database.ts";
import { providerEndpoints, stripeEndpoints } from "../receiver/endpoints.ts";
import { createMetrics } from "../receiver/metrics.ts";
import { createAdmin } from "../admin/admin.ts";

/** A configuration whose database is given (every runtime but `bun run serve` needs `DATABASE_URL`). */
export type ServerConfig = Config & { databaseUrl: string };

/**
 * {@link loadConfig} for an entry file that cannot start the embedded PostgreSQL: `DATABASE_URL` is
 * required. `env` is the runtime's env binding (Workers) or its process environment.
 * @throws ConfigError listing every problem, `DATABASE_URL` first.
 */
export function loadServerConfig(env: Record<string, string | undefined>, runtime: string): ServerConfig {
  const problems: string[] = [];
  if (!env.DATABASE_URL) problems.push(`DATABASE_URL is required on ${runtime} (only \`bun run serve\` starts an embedded PostgreSQL)`);
  try {
    const config = loadConfig(env);
    if (problems.length === 0 && config.databaseUrl !== undefined) return { ...config, databaseUrl: config.databaseUrl };
  } catch (err) {
    if (!(err instanceof ConfigError)) throw err;
    // Its "required when NODE_ENV=production" says less than ours, which is then already listed.
    problems.push(...err.problems.filter((p) => !(problems.length > 0 && p === PRODUCTION_NEEDS_DATABASE_URL)));
  }
  throw new ConfigError(problems);
}

/**
 * The receiver's pool: by default one connection more than the delivery limit (the spare serves the
 * NOTIFY after commits and the parking of refused events). `tls`: the URL's TLS settings with its
 * `sslrootcert` file read (runtime/database-tls.ts `databaseTls`, by the server entry files; this
 * module reads no file, so workerd can load it). Behind a transaction pooler
 * (`DATABASE_POOLER=transaction`) prepared statements are off (see {@link connect}).
 */
export function connectReceiver(url: string, config: Config, applicationName: string, max = config.dbPoolMax + 1, tls?: DatabaseTls): Db {
  return connect(url, { max, applicationName, pooler: config.databasePooler, tls });
}

/**
 * Two connections of their own for `/readyz` and `/metrics` (see `AppDeps.probeDb`), so they answer
 * from the database even while every delivery connection waits on a row lock, and a readiness check
 * does not queue behind a slow scrape.
 */
export function connectProbes(url: string, config: Config, applicationName: string, tls?: DatabaseTls): Db {
  return connect(url, { max: 2, applicationName: `${applicationName} probes`, pooler: config.databasePooler, tls });
}

/** Options of {@link receiverApp}. */
export interface ReceiverOptions {
  /** Migrations the code expects, for `/readyz`; default: reachability only. */
  schemaVersion?: number;
  /** One JSON line per delivery; default stdout. */
  log?: LogFn;
  /** Connection for `/readyz` and `/metrics` (see {@link connectProbes}); default `db`. */
  probeDb?: Db;
  /** OpenTelemetry (runtime/telemetry.ts `loadTelemetry`); default: no spans. */
  telemetry?: Telemetry;
}

/**
 * The core `fetch(Request) → Response` for `config` on `db`: the Stripe endpoints and those of
 * `WEBHOOK_ENDPOINTS` (GitHub, Shopify, Paddle, Adyen, …), with the operator's page under `/admin`
 * when `config.adminToken` is set (its duplicate rate read from this app's delivery counters).
 * @throws ConfigError when a `WEBHOOK_ENDPOINTS` entry names no registered provider or a refused secret.
 */
export function receiverApp(config: Config, db: Db, options: ReceiverOptions = {}): App {
  const endpoints = [
    ...stripeEndpoints(config.endpoints, config.hybridBudgetMs),
    ...providerEndpoints(config.providerEndpoints, config.hybridBudgetMs),
  ];
  const metrics = createMetrics();
  const admin =
    config.adminToken === undefined
      ? undefined
      : createAdmin({
          db,
          token: config.adminToken,
          readonly: config.adminReadonly,
          endpoints: endpoints.map((e) => {
            const stripe = e.route === "stripe";
            const refetch = stripe && config.endpoints.some((s) => s.name === e.name && s.refetch === true);
            return {
              provider: e.provider.name,
              name: e.name,
              handlers: e.handlers,
              mode: e.mode ?? "sync",
              // Stripe's endpoints carry a mode (livemode); other providers have none, so no "other mode" there.
              ...(stripe
                ? { stripeMode: e.livemode === undefined ? ("both" as const) : e.livemode ? ("live" as const) : ("test" as const) }
                : {}),
              traits: [
                ...(e.provider.name === "stripe-thin" ? ["thin"] : []),
                ...(refetch ? ["refetch"] : []),
                ...(e.connect ? ["connect"] : []),
              ],
            };
          }),
          deliveryCounts: metrics.deliveryCounts,
          log: options.log,
        });
  return createApp({
    db,
    probeDb: options.probeDb,
    log: options.log,
    metrics,
    admin,
    endpoints,
    toleranceSec: config.toleranceSec,
    maxBodyBytes: config.maxBodyBytes,
    bodyBudget: createBodyBudget(config.maxInflightBodyBytes),
    schemaVersion: options.schemaVersion,
    maxInFlight: config.dbPoolMax,
    queueTimeoutMs: config.queueTimeoutMs,
    statementTimeoutMs: config.statementTimeoutMs,
    metricsToken: config.metricsToken,
    telemetry: options.telemetry,
  });
}

/**
 * Brings the receiver's database to ready for the Node and Deno entry files: waits until it answers
 * ({@link waitForDatabase}, up to `config.databaseWaitMs`, one `log` line per failed attempt), refuses
 * a transaction pooler `DATABASE_POOLER` does not declare (before the migrations, the first
 * transaction), then applies pending `migrations` and `schema.app` (the app's own; or with
 * `schema.migrateOnStart` false only checks that none is pending: db/migrate.ts schemaAtStart) and creates the payload partitions ahead
 * (ensurePartitions, sql/0027). Returns the names it applied.
 * @throws Error naming DATABASE_POOLER behind an undeclared pooler; the wait's error past its limit or
 *   on `signal`; the migration's error.
 */
export async function prepareReceiverDatabase(
  db: Db,
  config: ServerConfig,
  migrations: readonly Migration[],
  signal: AbortSignal,
  log: (line: string) => void,
  tls?: DatabaseTls,
  schema: { app?: readonly Migration[]; migrateOnStart?: boolean } = {},
): Promise<string[]> {
  await waitForDatabase(db, { limitMs: config.databaseWaitMs, signal, log });
  const poolerProblem = await hiddenPoolerProblem(config.databaseUrl, config.databasePooler, tls);
  if (poolerProblem !== undefined) throw new Error(poolerProblem);
  const applied = await schemaAtStart(db, migrations, schema.app ?? [], schema.migrateOnStart ?? true);
  await ensurePartitions(db);
  return applied;
}
