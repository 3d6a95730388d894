// Entry file for Deno 2: `deno run --allow-net --allow-env --allow-read --allow-sys src/adapter/deno/serve.ts`.
// npm packages come from node_modules (bun install), so Deno needs no registry of its own.
import { ConfigError } from "../../config.ts";
import { migrate } from "../../migrate.ts";
import { hiddenPoolerProblem } from "../../pooler-check.ts";
import { loadMigrations } from "../../runtime/migrations-fs.ts";
import { connectProbes, connectReceiver, loadServerConfig, receiverApp, type ServerConfig } from "../../runtime/receiver.ts";

/** The part of the Deno namespace this file uses (the project typechecks with bun-types). */
declare const Deno: {
  env: { toObject(): Record<string, string> };
  serve(options: { hostname: string; port: number; onListen(addr: { hostname: string; port: number }): void }, handler: (request: Request) => Promise<Response>): { shutdown(): Promise<void> };
  addSignalListener(signal: "SIGTERM" | "SIGINT", handler: () => void): void;
  exit(code: number): never;
};

let config: ServerConfig;
try {
  config = loadServerConfig(Deno.env.toObject(), "Deno");
} catch (err) {
  console.error(err instanceof ConfigError ? err.message : err);
  Deno.exit(1);
}
const poolerProblem = await hiddenPoolerProblem(config.databaseUrl, config.databasePooler);
if (poolerProblem) {
  console.error(poolerProblem);
  Deno.exit(1);
}
const db = connectReceiver(config.databaseUrl, config, "webhook-inbox deno");
const probeDb = connectProbes(config.databaseUrl, config, "webhook-inbox deno");
const migrations = loadMigrations();
const applied = await migrate(db, migrations);
const app = receiverApp(config, db, { schemaVersion: migrations.length, probeDb });
const server = Deno.serve({
  hostname: config.host,
  port: config.port,
  onListen: ({ hostname, port }) => console.log(`webhook-inbox (Deno) listening on http://${hostname}:${port}${applied.length ? `, applied ${applied.join(", ")}` : ""}`),
}, app.fetch);

let stopping = false;
async function shutdown(signal: string): Promise<void> {
  if (stopping) Deno.exit(1); // second signal: exit at once
  stopping = true;
  console.log(`${signal}: no longer accepting; finishing in-flight requests`);
  await server.shutdown();
  await Promise.all([db.end({ timeout: 5 }), probeDb.end({ timeout: 1 })]);
  Deno.exit(0);
}
Deno.addSignalListener("SIGTERM", () => void shutdown("SIGTERM"));
Deno.addSignalListener("SIGINT", () => void shutdown("SIGINT"));
