// Edge file: the throwaway PostgreSQL of a test run and its migrated template database, shared by the
// test preload (test/setup.ts, a run of plain `bun test`) and the suite runner (src/dev/bin/test-suite.ts,
// which starts one server for all its parallel workers). Runtime-specific (child processes, files).
import { rm } from "node:fs/promises";
import { dirname } from "node:path";
import postgres from "postgres";
import { migrate } from "../db/migrate.ts";
import { startEmbeddedPostgres, temporaryDataDir, type EmbeddedServer } from "../runtime/embedded-postgres.ts";
import { loadMigrations } from "../runtime/migrations-fs.ts";
import { withDatabase } from "./scratch-database.ts";

/** The migrated database every test file clones (`create database … template`, test/support/helpers.ts freshDatabase). */
export const TEMPLATE_DB = "webhook_inbox_test_template";

/** A test run's server: the admin URL tests create their databases with, and how to stop it. */
export interface TestCluster {
  /** Admin URL (a user allowed to CREATE DATABASE), the `postgres` database. */
  url: string;
  /** Stops a server this run started (fast shutdown) and removes its files; nothing for DATABASE_URL's. */
  stop(): Promise<void>;
}

/**
 * The server of a test run: `databaseUrl` when given (its user needs CREATEDB; left running), else an
 * embedded PostgreSQL 18 in a temporary directory with `fsync=off` and `full_page_writes=off` (a
 * throwaway cluster gains nothing from surviving an OS crash; commits stay synchronous) and its log
 * quietened to FATAL and PANIC (see {@link quietServerLog}). Then the template database is (re)created and
 * migrated ({@link prepareTemplate}).
 * @throws Error when the server cannot start or the template cannot be prepared; a server started here is
 *   stopped first, so nothing outlives the failure.
 */
export async function startTestCluster(databaseUrl: string | undefined): Promise<TestCluster> {
  let server: EmbeddedServer | undefined;
  let dataDir: string | undefined;
  let url = databaseUrl;
  if (!url) {
    dataDir = await temporaryDataDir();
    server = await startEmbeddedPostgres({ dir: dataDir, port: 0, flags: ["-c", "fsync=off", "-c", "full_page_writes=off"] });
    url = server.url;
  }
  const stop = async () => {
    await server?.stop();
    if (dataDir) await rm(dirname(dataDir), { recursive: true, force: true });
  };
  try {
    if (server) await quietServerLog(url);
    await prepareTemplate(url);
  } catch (err) {
    await stop();
    throw err;
  }
  return { url, stop };
}

/**
 * Drops and creates {@link TEMPLATE_DB} on the server of `adminUrl` and migrates it with the package's
 * migrations. PostgreSQL manual, "Template Databases".
 * @throws the server's error, after printing one line naming the server's host (never its password).
 */
export async function prepareTemplate(adminUrl: string): Promise<void> {
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

/**
 * The embedded server writes its log to a pipe its parent must keep draining. Under `.ci/run` the
 * drain was seen to stop mid-run (after an unhandled postgres.js error in test/db/db.test.ts); the pipe
 * then filled with checkpoint lines (one pair per CREATE/DROP DATABASE) until the checkpointer blocked
 * on the write and every later DROP DATABASE waited on it forever. A throwaway cluster needs no LOG
 * lines: keep only FATAL and PANIC. (The "ready to accept connections" line that embedded-postgres
 * waits for has been read by now.) PostgreSQL manual, "When to Log".
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
