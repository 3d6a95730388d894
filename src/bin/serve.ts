// Entry file: `bun run serve`. Env, embedded PostgreSQL, migrations, Bun.serve and signals live here.
import { ConfigError, loadConfig, type Config } from "../config.ts";
import { migrate } from "../migrate.ts";
import { devWebhookSecret, openDatabase } from "../runtime/database.ts";
import { loadMigrations } from "../runtime/migrations-fs.ts";
import { connectProbes, connectReceiver, receiverApp } from "../runtime/receiver.ts";
import { onStopSignals } from "../runtime/signals.ts";
import { refuseHiddenPooler } from "../runtime/refuse-hidden-pooler.ts";

const env = process.env;
let config: Config;
try {
  config = loadConfig(env, env.DATABASE_URL ? undefined : devWebhookSecret());
} catch (err) {
  console.error(err instanceof ConfigError ? err.message : err);
  process.exit(1);
}

/** Startup failures end with one clear line and exit 1, never a stack trace. */
function fatal(what: string, err: unknown): never {
  console.error(`Cannot start webhook-inbox: ${what}: ${err instanceof Error ? err.message : String(err)}`);
  process.exit(1);
}

const database = await openDatabase(env).catch((err: unknown) => fatal("database", err));
await refuseHiddenPooler(database, config.databasePooler);
const db = connectReceiver(database.url, config, "webhook-inbox serve");
const probeDb = connectProbes(database.url, config, "webhook-inbox serve");
const migrations = loadMigrations();
const applied = await migrate(db, migrations).catch((err: unknown) => fatal("migrations", err));
const app = receiverApp(config, db, { schemaVersion: migrations.length, probeDb });
let server: ReturnType<typeof Bun.serve>;
try {
  server = Bun.serve({
    hostname: config.host,
    port: config.port,
    fetch: app.fetch,
    // Our own reader enforces the exact limit with a JSON 413; this only stops absurd uploads early.
    maxRequestBodySize: config.maxBodyBytes * 2,
  });
} catch (err) {
  fatal(`listening on ${config.host}:${config.port} (is the port taken? set PORT)`, err);
}

const base = `http://${config.host}:${server.port}`;
console.log(`webhook-inbox listening on ${base} (database: ${database.embedded ? "embedded PostgreSQL 18" : "DATABASE_URL"}${applied.length ? `, applied ${applied.join(", ")}` : ""})`);
for (const e of config.endpoints) {
  console.log(`  endpoint ${e.name} (${e.mode}): POST ${base}/webhooks/stripe/${e.name}${e === config.endpoints[0] ? ` (also ${base}/webhooks/stripe)` : ""}`);
}
if (database.embedded) {
  console.log(`  development database: embedded PostgreSQL in ${env.EMBEDDED_PG_DIR ?? ".data/postgres"} (not for production: set DATABASE_URL)`);
}
if (config.endpoints[0]?.source === "generated") {
  console.log("  no STRIPE_WEBHOOK_SECRET set: using the development secret in .data/dev-webhook-secret (bun run deliver reads it)");
}

async function shutdown(signal: string): Promise<void> {
  console.log(`${signal}: no longer accepting; finishing in-flight requests`);
  await server.stop();
  await Promise.all([db.end({ timeout: 5 }), probeDb.end({ timeout: 1 })]);
  await database.close();
  process.exit(0);
}
// A second signal (not the duplicate Ctrl-C of `bun run`) exits at once.
onStopSignals((signal) => void shutdown(signal), () => process.exit(1));
