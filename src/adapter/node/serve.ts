// Entry file for Node.js 20: `bun run build:node && node dist/node/serve.mjs` (a bundle, since Node 20
// cannot load TypeScript). node:http serves the core fetch through @remix-run/node-fetch-server.
import { createServer } from "node:http";
import { loadTelemetry } from "../../runtime/telemetry.ts";
import { createRequestListener } from "@remix-run/node-fetch-server";
import type { DatabaseTls } from "../../db/db.ts";
import { databaseTls } from "../../runtime/database-tls.ts";
import { loadMigrations } from "../../runtime/migrations-fs.ts";
import { startBanner } from "../../runtime/start-banner.ts";
import {
  connectProbes,
  connectReceiver,
  loadServerConfig,
  prepareReceiverDatabase,
  receiverApp,
  type ServerConfig,
} from "../../runtime/receiver.ts";
import { onStopSignals } from "../../runtime/signals.ts";
import { createStartingApp } from "../../receiver/starting-app.ts";

let config: ServerConfig;
let tls: DatabaseTls | undefined;
try {
  config = loadServerConfig(process.env, "Node.js");
  tls = databaseTls(config.databaseUrl);
} catch (err) {
  console.error(err instanceof Error ? err.message : err);
  process.exit(1);
}
const db = connectReceiver(config.databaseUrl, config, "webhook-inbox node", undefined, tls);
const probeDb = connectProbes(config.databaseUrl, config, "webhook-inbox node", tls);
const stopping = new AbortController();
// Listen before the database answers: /healthz 200, /readyz and deliveries 503 until it is migrated.
const starting = createStartingApp();
const server = createServer(createRequestListener(starting.fetch));
const listening = new Promise<string>((resolve) => {
  server.listen(config.port, config.host, () => {
    const address = server.address();
    resolve(`http://${config.host}:${typeof address === "object" && address ? address.port : config.port}`);
  });
});

async function shutdown(signal: string): Promise<void> {
  console.log(`${signal}: no longer accepting; finishing in-flight requests`);
  stopping.abort(new Error(`Stopped by ${signal}`));
  // close() stops accepting, closes idle keep-alive connections and resolves when the busy ones finish.
  await new Promise<void>((resolve) => server.close(() => resolve()));
  await Promise.all([db.end({ timeout: 5 }), probeDb.end({ timeout: 1 })]);
  process.exit(0);
}
// A repeated SIGTERM is ignored; a second Ctrl-C (not the duplicate of `bun run`) exits at once.
onStopSignals(
  (signal) => void shutdown(signal),
  () => process.exit(1),
);

try {
  const migrations = loadMigrations();
  const applied = await prepareReceiverDatabase(db, config, migrations, stopping.signal, (line) => console.error(line), tls);
  starting.ready(receiverApp(config, db, { schemaVersion: migrations.length, probeDb, telemetry: await loadTelemetry(process.env) }));
  const base = await listening;
  console.log(`webhook-inbox (Node.js ${process.version}) listening on ${base}${applied.length ? `, applied ${applied.join(", ")}` : ""}`);
  for (const line of startBanner(config, base)) console.log(line);
} catch (err) {
  // A stop during the wait is finished by shutdown(); anything else ends here with one line.
  if (!stopping.signal.aborted) {
    console.error(`Cannot start webhook-inbox (Node.js): ${err instanceof Error ? err.message : String(err)}`);
    process.exit(1);
  }
}
