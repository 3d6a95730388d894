// Entry file for Deno 2: `deno run --allow-net --allow-env --allow-read --allow-sys src/adapter/deno/serve.ts`.
// npm packages come from node_modules (bun install), so Deno needs no registry of its own.
import type { DatabaseTls } from "../../db/db.ts";
import { loadTelemetry } from "../../runtime/telemetry.ts";
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
import { createStartingApp } from "../../receiver/starting-app.ts";

/** The part of the Deno namespace this file uses (the project typechecks with bun-types). */
declare const Deno: {
  env: { toObject(): Record<string, string> };
  serve(
    options: { hostname: string; port: number; onListen(addr: { hostname: string; port: number }): void },
    handler: (request: Request) => Promise<Response>,
  ): { shutdown(): Promise<void> };
  addSignalListener(signal: "SIGTERM" | "SIGINT", handler: () => void): void;
  exit(code: number): never;
};

let config: ServerConfig;
let tls: DatabaseTls | undefined;
try {
  config = loadServerConfig(Deno.env.toObject(), "Deno");
  tls = databaseTls(config.databaseUrl);
} catch (err) {
  console.error(err instanceof Error ? err.message : err);
  Deno.exit(1);
}
const db = connectReceiver(config.databaseUrl, config, "webhook-inbox deno", undefined, tls);
const probeDb = connectProbes(config.databaseUrl, config, "webhook-inbox deno", tls);
const stopping = new AbortController();
// Listen before the database answers: /healthz 200, /readyz and deliveries 503 until it is migrated.
const starting = createStartingApp();
let base = "";
const server = Deno.serve(
  {
    hostname: config.host,
    port: config.port,
    onListen: ({ hostname, port }) => (base = `http://${hostname}:${port}`),
  },
  starting.fetch,
);

let stopped = false;
async function shutdown(signal: string): Promise<void> {
  if (stopped) Deno.exit(1); // second signal: exit at once
  stopped = true;
  console.log(`${signal}: no longer accepting; finishing in-flight requests`);
  stopping.abort(new Error(`Stopped by ${signal}`));
  await server.shutdown();
  await Promise.all([db.end({ timeout: 5 }), probeDb.end({ timeout: 1 })]);
  Deno.exit(0);
}
Deno.addSignalListener("SIGTERM", () => void shutdown("SIGTERM"));
Deno.addSignalListener("SIGINT", () => void shutdown("SIGINT"));

try {
  const migrations = loadMigrations();
  const applied = await prepareReceiverDatabase(db, config, migrations, stopping.signal, (line) => console.error(line), tls);
  starting.ready(receiverApp(config, db, { schemaVersion: migrations.length, probeDb, telemetry: await loadTelemetry(Deno.env.toObject()) }));
  console.log(`webhook-inbox (Deno) listening on ${base}${applied.length ? `, applied ${applied.join(", ")}` : ""}`);
  for (const line of startBanner(config, base)) console.log(line);
} catch (err) {
  // A stop during the wait is finished by shutdown(); anything else ends here with one line.
  if (!stopping.signal.aborted) {
    console.error(`Cannot start webhook-inbox (Deno): ${err instanceof Error ? err.message : String(err)}`);
    Deno.exit(1);
  }
}
