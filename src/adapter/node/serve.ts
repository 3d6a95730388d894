// Entry file for Node.js 20: `bun run build:node && node dist/node/serve.mjs` (a bundle, since Node 20
// cannot load TypeScript). node:http serves the core fetch through @remix-run/node-fetch-server.
import { createServer } from "node:http";
import { createRequestListener } from "@remix-run/node-fetch-server";
import { ConfigError } from "../../config.ts";
import { migrate } from "../../migrate.ts";
import { loadMigrations } from "../../runtime/migrations-fs.ts";
import { connectProbes, connectReceiver, loadServerConfig, receiverApp, type ServerConfig } from "../../runtime/receiver.ts";
import { refuseHiddenPooler } from "../../runtime/refuse-hidden-pooler.ts";
import { onStopSignals } from "../../runtime/signals.ts";

let config: ServerConfig;
try {
  config = loadServerConfig(process.env, "Node.js");
} catch (err) {
  console.error(err instanceof ConfigError ? err.message : err);
  process.exit(1);
}
await refuseHiddenPooler({ url: config.databaseUrl }, config.databasePooler);
const db = connectReceiver(config.databaseUrl, config, "webhook-inbox node");
const probeDb = connectProbes(config.databaseUrl, config, "webhook-inbox node");
const migrations = loadMigrations();
const applied = await migrate(db, migrations);
const app = receiverApp(config, db, { schemaVersion: migrations.length, probeDb });
const server = createServer(createRequestListener(app.fetch));
server.listen(config.port, config.host, () => {
  const address = server.address();
  const port = typeof address === "object" && address ? address.port : config.port;
  console.log(`webhook-inbox (Node.js ${process.version}) listening on http://${config.host}:${port}${applied.length ? `, applied ${applied.join(", ")}` : ""}`);
});

async function shutdown(signal: string): Promise<void> {
  console.log(`${signal}: no longer accepting; finishing in-flight requests`);
  // close() stops accepting, closes idle keep-alive connections and resolves when the busy ones finish.
  await new Promise<void>((resolve) => server.close(() => resolve()));
  await Promise.all([db.end({ timeout: 5 }), probeDb.end({ timeout: 1 })]);
  process.exit(0);
}
// A second signal (not the duplicate Ctrl-C of `bun run`) exits at once.
onStopSignals((signal) => void shutdown(signal), () => process.exit(1));
