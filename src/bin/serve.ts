// Entry file: `bun run serve`. Env, embedded PostgreSQL, migrations, Bun.serve and signals live here.
import { providerEndpoints } from "../receiver/endpoints.ts";
import { jsonLines, readLogLevel, type LogFn, type LogLevel } from "../log.ts";
import { ConfigError, loadConfig, type Config } from "../config.ts";
import { flushTelemetry, loadTelemetry } from "../runtime/telemetry.ts";
import type { Db } from "../db/db.ts";
import { devWebhookSecret } from "../runtime/database.ts";
import { openReadyDatabase } from "../runtime/ready-database.ts";
import { connectProbes, connectReceiver, receiverApp } from "../runtime/receiver.ts";
import { databaseTls } from "../runtime/database-tls.ts";
import { startBanner } from "../runtime/start-banner.ts";
import { SERVE_USAGE, takeNoArguments } from "../runtime/command-args.ts";
import { commandLine } from "../runtime/command-name.ts";
import { onStopSignals } from "../runtime/signals.ts";
import { createStartingApp } from "../receiver/starting-app.ts";
import { readCatchUpSettings, startCatchUp, type CatchUpSettings } from "../runtime/catch-up.ts";
import { readFailoverSettings, startFailoverWatch, type FailoverSettings } from "../runtime/failover.ts";

takeNoArguments("serve", SERVE_USAGE, process.argv.slice(2));

const env = process.env;

/** `LOG_LEVEL`, its problem reported like the other settings' (one line, exit 1). */
function logLevelOf(values: Record<string, string | undefined>): LogLevel {
  try {
    return readLogLevel(values);
  } catch (err) {
    throw new ConfigError([err instanceof Error ? err.message : String(err)]);
  }
}
let config: Config;
let catchUpSettings: CatchUpSettings;
let failoverSettings: FailoverSettings;
/** One JSON line per delivery and catch-up step (src/log.ts), below LOG_LEVEL dropped. */
let log: LogFn;
try {
  // No development secret is made (or written to .data/) where it could not be used.
  const devSecretUsable = !env.DATABASE_URL && env.NODE_ENV !== "production" && !env.STRIPE_WEBHOOK_SECRET?.trim();
  config = loadConfig(env, devSecretUsable ? devWebhookSecret() : undefined);
  catchUpSettings = readCatchUpSettings(env);
  // WEBHOOK_ENDPOINTS' providers and secrets are checked now, with the other settings (one line, exit 1).
  providerEndpoints(config.providerEndpoints, config.hybridBudgetMs);
  failoverSettings = readFailoverSettings(env);
  log = jsonLines({ level: logLevelOf(env) });
} catch (err) {
  console.error(err instanceof ConfigError ? err.message : err);
  process.exit(1);
}

// Signals first: a stop must reach us before anything is spawned. A repeated SIGTERM is ignored; a second Ctrl-C (not
// the duplicate of `bun run`) exits at once (see onStopSignals).
// (Handlers run at the first await below, once `server` and `startup` exist.)
const stopping = new AbortController();
let probeDb: Db | undefined;
let catchUp: Promise<void> | undefined;
let failoverWatch: Promise<void> | undefined;
onStopSignals(
  (signal) => void shutdown(signal),
  () => process.exit(1),
);

// Listen before the database answers: /healthz 200, /readyz and deliveries 503 meanwhile.
const starting = createStartingApp();
let server: ReturnType<typeof Bun.serve>;
try {
  server = Bun.serve({
    hostname: config.host,
    port: config.port,
    fetch: starting.fetch,
    // Our own reader enforces the exact limit with a JSON 413; this only stops absurd uploads early.
    maxRequestBodySize: config.maxBodyBytes * 2,
  });
} catch (err) {
  console.error(
    `Cannot start webhook-inbox: listening on ${config.host}:${config.port} (is the port taken? set PORT): ${err instanceof Error ? err.message : String(err)}`,
  );
  process.exit(1);
}
const base = `http://${config.host}:${server.port}`;
console.log(`webhook-inbox starting on ${base}: /healthz answers, deliveries get 503 until the database is ready`);

// OpenTelemetry when `@opentelemetry/api` is installed (an SDK registered by a --preload file exports).
// Not awaited here: a stop signal's handler runs at the first await and needs `startup` to exist.
const telemetryLoaded = loadTelemetry(env);
const startup = openReadyDatabase({
  command: "webhook-inbox serve",
  env,
  connect: (url) => connectReceiver(url, config, "webhook-inbox serve", undefined, databaseTls(url)),
  signal: stopping.signal,
  waitMs: config.databaseWaitMs,
  pooler: config.databasePooler,
});
const ready = await startup;
if (ready) {
  const { database, db, applied, schemaVersion } = ready;
  probeDb = connectProbes(database.url, config, "webhook-inbox serve", databaseTls(database.url));
  const telemetry = await telemetryLoaded;
  starting.ready(receiverApp(config, db, { schemaVersion, probeDb, telemetry, log }));
  console.log(
    `webhook-inbox listening on ${base} (database: ${database.embedded ? "embedded PostgreSQL 18" : "DATABASE_URL"}${applied.length ? `, applied ${applied.join(", ")}` : ""})`,
  );
  // Endpoints, the operator's page and /metrics: where they are and whether a token guards them (never its value).
  for (const line of startBanner(config, base)) console.log(line);
  if (database.embedded) {
    console.log(
      `  development database: embedded PostgreSQL in ${env.EMBEDDED_PG_DIR ?? ".data/postgres"}, kept running after serve (${commandLine("db:status")}, ${commandLine("db:stop")}; not for production: set DATABASE_URL)`,
    );
  }
  // Event backfill after downtime and on a schedule (RECONCILE_IDLE_AFTER, RECONCILE_EVERY), when turned on.
  catchUp = startCatchUp(env, catchUpSettings, db, stopping.signal, log, telemetry);
  if (catchUp) console.log("  event catch-up from Stripe's Events API: on (RECONCILE_IDLE_AFTER / RECONCILE_EVERY)");
  // A primary that changed (failover) is noticed and what it may have lost is backfilled (docs/failover.md).
  failoverWatch = startFailoverWatch(env, failoverSettings, catchUpSettings, db, stopping.signal, log);
  if (config.endpoints[0]?.source === "generated") {
    console.log(
      `  no STRIPE_WEBHOOK_SECRET set: using the development secret in .data/dev-webhook-secret (${commandLine("deliver")} reads it)`,
    );
  }
}

async function shutdown(signal: string): Promise<void> {
  console.log(`${signal}: no longer accepting; finishing in-flight requests`);
  stopping.abort(new Error(`Stopped by ${signal}`));
  // A stop during start-up: the start closes its pool itself and resolves null.
  const opened = await startup;
  await server.stop();
  if (opened) {
    await catchUp;
    await failoverWatch;
    await Promise.all([opened.db.end({ timeout: 5 }), probeDb?.end({ timeout: 1 })]);
  }
  await flushTelemetry(await telemetryLoaded);
  process.exit(0);
}
