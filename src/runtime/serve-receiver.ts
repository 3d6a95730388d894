// Edge file: the receiver's start and stop around a server its entry file brings (Deno.serve, node:http):
// settings, pools, the starting app, the database made ready, the banner and the shutdown.
import type { DatabaseTls } from "../db/db.ts";
import { createStartingApp } from "../receiver/starting-app.ts";
import { databaseTls } from "./database-tls.ts";
import { loadAppMigrations, loadMigrations } from "./migrations-fs.ts";
import { readMigrateOnStart } from "../db/migrate.ts";
import { connectProbes, connectReceiver, loadServerConfig, prepareReceiverDatabase, receiverApp, type ServerConfig } from "./receiver.ts";
import { startBanner } from "./start-banner.ts";
import { loadTelemetry } from "./telemetry.ts";

/** What an entry file gives {@link serveReceiver}: its runtime's environment, exit, server and signals. */
export interface ReceiverRuntime {
  /** The runtime in messages, e.g. `Node.js`. */
  name: string;
  /** The runtime in the listening line, e.g. `Node.js v20.11.0`; default `name`. */
  version?: string;
  /** The pools' `application_name`, e.g. `webhook-inbox node` (the probes' gets ` probes`). */
  application: string;
  env: Record<string, string | undefined>;
  exit(code: number): never;
  /**
   * Starts listening on `config.host`:`config.port` with `fetch`: `base` resolves to where
   * (`http://<host>:<port>`) once it listens; `close()` stops accepting and resolves once the requests
   * in flight are answered.
   */
  listen(config: ServerConfig, fetch: (request: Request) => Promise<Response>): { base: Promise<string>; close(): Promise<void> };
  /** Wires the runtime's stop signals to `stop(<signal name>)`. */
  onStop(stop: (signal: string) => void): void;
}

/**
 * Serves the receiver on `runtime` with `DATABASE_URL` ({@link loadServerConfig}): listens before the
 * database answers (/healthz 200, /readyz and deliveries 503 until it is migrated:
 * {@link prepareReceiverDatabase}), then serves the receiver and prints where, with the start banner. A
 * stop signal stops accepting, finishes the requests in flight, closes the pools and exits 0. Invalid
 * settings, and a start that failed other than by a stop, print one line and exit 1.
 */
export async function serveReceiver(runtime: ReceiverRuntime): Promise<void> {
  let config: ServerConfig;
  let tls: DatabaseTls | undefined;
  try {
    config = loadServerConfig(runtime.env, runtime.name);
    tls = databaseTls(config.databaseUrl);
  } catch (err) {
    console.error(err instanceof Error ? err.message : err);
    runtime.exit(1);
  }
  const db = connectReceiver(config.databaseUrl, config, runtime.application, undefined, tls);
  const probeDb = connectProbes(config.databaseUrl, config, runtime.application, tls);
  const stopping = new AbortController();
  const starting = createStartingApp();
  const server = runtime.listen(config, starting.fetch);
  runtime.onStop(async (signal) => {
    console.log(`${signal}: no longer accepting; finishing in-flight requests`);
    stopping.abort(new Error(`Stopped by ${signal}`));
    await server.close();
    await Promise.all([db.end({ timeout: 5 }), probeDb.end({ timeout: 1 })]);
    runtime.exit(0);
  });
  try {
    const migrations = loadMigrations();
    const schema = { app: loadAppMigrations(), migrateOnStart: readMigrateOnStart(runtime.env) };
    const applied = await prepareReceiverDatabase(db, config, migrations, stopping.signal, (line) => console.error(line), tls, schema);
    starting.ready(receiverApp(config, db, { schemaVersion: migrations.length, probeDb, telemetry: await loadTelemetry(runtime.env) }));
    const base = await server.base;
    console.log(
      `webhook-inbox (${runtime.version ?? runtime.name}) listening on ${base}${applied.length ? `, applied ${applied.join(", ")}` : ""}`,
    );
    for (const line of startBanner(config, base)) console.log(line);
  } catch (err) {
    // A stop during the wait is finished by the stop above; anything else ends here with one line.
    if (!stopping.signal.aborted) {
      console.error(`Cannot start webhook-inbox (${runtime.name}): ${err instanceof Error ? err.message : String(err)}`);
      runtime.exit(1);
    }
  }
}
