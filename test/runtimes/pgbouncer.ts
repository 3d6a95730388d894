// Test helper: a PgBouncer (Debian package) in transaction pooling mode in front of the test PostgreSQL,
// on a free loopback port, with its own ini and userlist in a temporary directory. A missing binary
// throws; test files check first with requireBinary (test/support/support-binary.ts).
import { spawn, type ChildProcess } from "node:child_process";
import { chmodSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { freePort } from "../../src/runtime/embedded-postgres.ts";
import { findBinary } from "../support/support-binary.ts";
import { waitUntil } from "../support/wait-until.ts";

/** A running PgBouncer: `url(database)` goes through it; `stop()` ends it (by its pid). */
export interface PgBouncer {
  port: number;
  url(database: string): string;
  /** Its log so far (stderr), for failure messages. */
  log(): string;
  stop(): Promise<void>;
}

/** The pgbouncer binary ({@link findBinary}: PATH, /usr/sbin, or `PGBOUNCER_BIN`), or an error saying how to get it. */
export function pgbouncerBinary(): string {
  const found = findBinary("pgbouncer");
  if (!found) throw new Error("PgBouncer is not installed: `apt-get install pgbouncer` (.ci/run does this)");
  return found;
}

/**
 * Starts PgBouncer with `pool_mode = transaction` in front of the server of `serverUrl` (any database
 * name is passed through: `* = host=… port=…`); `sessionDatabases` are served with `pool_mode = session`;
 * `queryWaitTimeoutSec` bounds how long a client waits for a server connection. Clients authenticate with the server's own user and
 * password (SCRAM, plain password in userlist.txt, which PgBouncer also uses towards the server).
 * PgBouncer refuses to run as root, so as root it runs as `nobody` (`-u`).
 */
export async function startPgBouncer(
  serverUrl: string,
  options: { poolSize?: number; sessionDatabases?: string[]; queryWaitTimeoutSec?: number } = {},
): Promise<PgBouncer> {
  const binary = pgbouncerBinary();
  const server = new URL(serverUrl);
  const user = decodeURIComponent(server.username);
  const password = decodeURIComponent(server.password);
  const port = await freePort();
  const dir = mkdtempSync(join(tmpdir(), "webhook-inbox-pgbouncer-"));
  chmodSync(dir, 0o755);
  const quote = (s: string) => `"${s.replaceAll('"', '""')}"`;
  writeFileSync(join(dir, "userlist.txt"), `${quote(user)} ${quote(password)}\n`, { mode: 0o644 });
  writeFileSync(
    join(dir, "pgbouncer.ini"),
    [
      "[databases]",
      ...(options.sessionDatabases ?? []).map((name) => `${name} = host=${server.hostname} port=${server.port || 5432} pool_mode=session`),
      `* = host=${server.hostname} port=${server.port || 5432}`,
      "[pgbouncer]",
      "listen_addr = 127.0.0.1",
      `listen_port = ${port}`,
      "unix_socket_dir =",
      "auth_type = scram-sha-256",
      `auth_file = ${join(dir, "userlist.txt")}`,
      "pool_mode = transaction",
      `default_pool_size = ${options.poolSize ?? 4}`,
      "max_client_conn = 500",
      "max_db_connections = 50",
      "server_login_retry = 1",
      ...(options.queryWaitTimeoutSec === undefined ? [] : [`query_wait_timeout = ${options.queryWaitTimeoutSec}`]),
      "ignore_startup_parameters = extra_float_digits",
      "",
    ].join("\n"),
    { mode: 0o644 },
  );
  const asRoot = process.getuid?.() === 0;
  const child: ChildProcess = spawn(binary, [...(asRoot ? ["-u", "nobody"] : []), join(dir, "pgbouncer.ini")], {
    stdio: ["ignore", "ignore", "pipe"],
  });
  let log = "";
  child.stderr?.on("data", (chunk: Buffer) => (log += chunk.toString("utf8")));
  const exited = new Promise<number | null>((resolve) => child.once("exit", (code) => resolve(code)));
  const stop = async () => {
    if (child.exitCode === null && child.signalCode === null && child.pid !== undefined) process.kill(child.pid, "SIGTERM");
    await exited;
    rmSync(dir, { recursive: true, force: true });
  };
  try {
    await waitUntil("PgBouncer to start", async () => log.includes("process up") || child.exitCode !== null, {
      timeoutMs: 10_000,
      intervalMs: 20,
    });
    if (child.exitCode !== null) throw new Error(`exited with ${child.exitCode}`);
  } catch (err) {
    await stop();
    throw new Error(`Cannot start PgBouncer on 127.0.0.1:${port}: ${String(err)}\n${log}`);
  }
  return {
    port,
    url(database) {
      const u = new URL(serverUrl);
      u.hostname = "127.0.0.1";
      u.port = String(port);
      u.pathname = `/${database}`;
      return u.toString();
    },
    log: () => log,
    stop,
  };
}
