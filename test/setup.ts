// Test preload: one PostgreSQL server for the whole `bun test` run and a migrated template database
// that each test file clones (test/support/helpers.ts freshDatabase). DATABASE_URL points at another server
// (its user must be allowed to CREATE DATABASE); otherwise an embedded PostgreSQL 18 is started in a
// temporary directory. A server that cannot start fails the run: never a green run without a database.
import { afterAll } from "bun:test";
import { rm } from "node:fs/promises";
import { dirname } from "node:path";
import postgres from "postgres";
import { migrate } from "../src/db/migrate.ts";
import { startEmbeddedPostgres, temporaryDataDir, type EmbeddedServer } from "../src/runtime/embedded-postgres.ts";
import { loadMigrations } from "../src/runtime/migrations-fs.ts";
import { withDatabase } from "../src/dev/scratch-database.ts";

export const TEMPLATE_DB = "webhook_inbox_test_template";

let server: EmbeddedServer | undefined;
let dataDir: string | undefined;
let adminUrl = process.env.DATABASE_URL;
if (!adminUrl) {
  // fsync off: a throwaway cluster gains nothing from surviving an OS crash; commits stay synchronous.
  dataDir = await temporaryDataDir();
  server = await startEmbeddedPostgres({ dir: dataDir, port: 0, flags: ["-c", "fsync=off", "-c", "full_page_writes=off"] });
  adminUrl = server.url;
}
process.env.TEST_ADMIN_URL = adminUrl;
try {
  await prepareTemplate(adminUrl);
} catch (err) {
  // The run fails here; a server left running would outlive it (nothing else stops it).
  await stopServer();
  throw err;
}

/** Creates the template database and migrates it (the server's log quietened first when it is ours). */
async function prepareTemplate(adminUrl: string): Promise<void> {
  if (server) await quietServerLog(adminUrl);
  const admin = postgres(adminUrl, { max: 1, onnotice: () => {} });
  try {
    await admin.unsafe(`drop database if exists ${TEMPLATE_DB} with (force)`);
    await admin.unsafe(`create database ${TEMPLATE_DB}`);
  } catch (err) {
    console.error(`Cannot prepare the test database on ${new URL(adminUrl).host}: ${String(err)}`);
    throw err;
  } finally {
    await admin.end();
  }
  const template = postgres(withDatabase(adminUrl, TEMPLATE_DB), { max: 1, onnotice: () => {} });
  try {
    await migrate(template, loadMigrations());
  } finally {
    await template.end();
  }
}

async function stopServer(): Promise<void> {
  await server?.stop();
  if (dataDir) await rm(dirname(dataDir), { recursive: true, force: true });
}

afterAll(stopServer);

/**
 * The embedded server writes its log to a pipe this process must keep draining. Under `.ci/run` the
 * drain was seen to stop mid-run (after an unhandled postgres.js error in test/db/db.test.ts); the pipe
 * then filled with checkpoint lines (one pair per CREATE/DROP DATABASE) until the checkpointer blocked
 * on the write and every later DROP DATABASE waited on it forever. A throwaway cluster needs no LOG
 * lines: keep only FATAL and PANIC. (The "ready to accept connections" line that embedded-postgres
 * waits for has been read by now.)
 */
async function quietServerLog(url: string): Promise<void> {
  const sql = postgres(url, { max: 1, onnotice: () => {} });
  try {
    await sql.unsafe("alter system set log_checkpoints = off");
    await sql.unsafe("alter system set log_min_messages = fatal");
    await sql.unsafe("select pg_reload_conf()");
  } finally {
    await sql.end();
  }
}
