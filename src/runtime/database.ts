// Edge file: where the database comes from when a command starts (DATABASE_URL or embedded).
import postgres from "postgres";
import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { databaseUrlProblem, nodeEnvProblem, PRODUCTION_NEEDS_DATABASE_URL, readPooler } from "../config.ts";
import type { Pooler } from "../db/db.ts";
import { startEmbeddedPostgres } from "./embedded-postgres.ts";
import { forgetOwner, liveOwner, recordOwner, stopPostmaster, withStartLock } from "./embedded-owner.ts";

/** The repository's gitignored `.data/` folder (embedded cluster, dev secret). */
export const DATA_DIR = fileURLToPath(new URL("../../.data/", import.meta.url));

/** A database to use: its URL, whether it is the embedded one, and how to release it. */
export interface DatabaseHandle {
  url: string;
  embedded: boolean;
  /** Stops the embedded server if this process started it; otherwise does nothing. */
  close(): Promise<void>;
}

/**
 * `DATABASE_URL` when set; otherwise the embedded PostgreSQL 18 kept in `.data/postgres`
 * (`EMBEDDED_PG_DIR`), on 127.0.0.1:`EMBEDDED_PG_PORT` (default 54329). When that cluster is already
 * running, it is reused (two commands started at once take turns: see `withStartLock`): while the command that started it (its pid is recorded in the data directory,
 * see embedded-owner.ts) still runs, that command stops it, and this one says so on stderr; when that
 * command is gone (killed with SIGKILL, say), this one takes it over and stops it on close.
 * `options.signal` is a stop requested during start-up (see `EmbeddedOptions.signal`).
 * @throws Error when `DATABASE_URL` cannot be read (the message never quotes it), `EMBEDDED_PG_PORT` is
 *   not a port number, the embedded server cannot start, `NODE_ENV` is not production, development or
 *   test, or `NODE_ENV=production` comes without `DATABASE_URL`; `options.signal.reason` when stopped
 *   while the embedded server started.
 */
export async function openDatabase(
  env: Record<string, string | undefined>,
  options: { signal?: AbortSignal } = {},
): Promise<DatabaseHandle> {
  const envProblem = nodeEnvProblem(env);
  if (envProblem) throw new Error(envProblem);
  if (env.DATABASE_URL) {
    // Checked here too (not only by loadConfig): worker, dispatch and inbox come straight here, and
    // postgres.js's own error for an unreadable URL quotes it, password included.
    const problem = databaseUrlProblem(env.DATABASE_URL);
    if (problem) throw new Error(problem);
    return { url: env.DATABASE_URL, embedded: false, close: async () => {} };
  }
  if (env.NODE_ENV === "production") {
    // A production receiver must never acknowledge payments into a disposable local cluster.
    throw new Error(PRODUCTION_NEEDS_DATABASE_URL);
  }
  const dir = env.EMBEDDED_PG_DIR ?? join(DATA_DIR, "postgres");
  const port = Number(env.EMBEDDED_PG_PORT ?? 54329);
  if (!Number.isInteger(port) || port < 1 || port > 65_535) {
    // 0 would pick a random port each time, so the next command could never find and reuse the server.
    throw new Error(`EMBEDDED_PG_PORT must be a port number from 1 to 65535, got "${env.EMBEDDED_PG_PORT}"`);
  }
  const url = `postgres://postgres:postgres@127.0.0.1:${port}/postgres`;
  // One command at a time decides between reusing and starting (serve and worker started together).
  return withStartLock(
    dir,
    async () => {
      if (existsSync(join(dir, "postmaster.pid")) && (await answers(url))) return reuseEmbedded(dir, url, port);
      const other = runningOnOtherPort(dir, port);
      if (other !== undefined)
        throw new Error(
          `The embedded PostgreSQL in ${dir} runs on port ${other}, not ${port}: run this command with EMBEDDED_PG_PORT=${other}`,
        );
      // Its own process group: Ctrl-C must reach only this command, which stops the server after its
      // graceful shutdown (a server in the terminal's group would stop at once under in-flight requests).
      const server = await startEmbeddedPostgres({ dir, port, ownProcessGroup: true, signal: options.signal });
      recordOwner(dir);
      return {
        url: server.url,
        embedded: true,
        close: async () => {
          await server.stop();
          forgetOwner(dir);
        },
      };
    },
    options.signal,
  );
}

/**
 * The running embedded server on `dir`: left to its owner while that command lives, otherwise taken
 * over, so a server orphaned by a killed command is stopped by the next one that uses it.
 */
function reuseEmbedded(dir: string, url: string, port: number): DatabaseHandle {
  const owner = liveOwner(dir);
  if (owner !== undefined) {
    console.error(`Using the embedded PostgreSQL on port ${port} started by process ${owner}: it stops when that command exits`);
    return { url, embedded: true, close: async () => {} };
  }
  recordOwner(dir);
  console.error(`Using the embedded PostgreSQL on port ${port} left running by a command that is gone: this command stops it on exit`);
  return {
    url,
    embedded: true,
    close: async () => {
      await stopPostmaster(dir);
      forgetOwner(dir);
    },
  };
}

async function answers(url: string): Promise<boolean> {
  const probe = postgres(url, { max: 1, connect_timeout: 2, onnotice: () => {} });
  try {
    await probe`select 1`;
    return true;
  } catch {
    return false;
  } finally {
    await probe.end({ timeout: 1 });
  }
}

/**
 * A development signing secret kept in `.data/dev-webhook-secret`, created on first use, so a local
 * receiver without `STRIPE_WEBHOOK_SECRET` keeps the same secret across restarts. Never used when
 * `DATABASE_URL` is set (config refuses that).
 */
export function devWebhookSecret(): string {
  const file = join(DATA_DIR, "dev-webhook-secret");
  if (existsSync(file)) return readFileSync(file, "utf8").trim();
  const bytes = crypto.getRandomValues(new Uint8Array(24));
  const secret = `whsec_dev_${[...bytes].map((b) => b.toString(16).padStart(2, "0")).join("")}`;
  mkdirSync(DATA_DIR, { recursive: true });
  try {
    writeFileSync(file, `${secret}\n`, { mode: 0o600, flag: "wx" });
  } catch (err) {
    // Another command created it at the same moment: use that one, so both sign and verify alike.
    if ((err as { code?: unknown }).code === "EEXIST") return readFileSync(file, "utf8").trim();
    throw err;
  }
  return secret;
}

/**
 * `DATABASE_POOLER` for the commands that open their own pool (inbox, billing, migrate, dispatch).
 * @throws Error naming the variable when its value is neither `none` nor `transaction`.
 */
export function poolerFromEnv(env: Record<string, string | undefined>): Pooler {
  const problems: string[] = [];
  const pooler = readPooler(env, problems);
  if (problems[0]) throw new Error(problems[0]);
  return pooler;
}

/**
 * The port the live postmaster of `dir` listens on, when it is not `port` (postmaster.pid: pid on line
 * 1, port on line 4; PostgreSQL manual, "Database File Layout"); undefined when none runs there or it
 * uses `port`. A command given another EMBEDDED_PG_PORT than the one that started the server would
 * otherwise try to start a second postmaster on the same directory and print PostgreSQL's lock-file error.
 */
function runningOnOtherPort(dir: string, port: number): number | undefined {
  let lines: string[];
  try {
    lines = readFileSync(join(dir, "postmaster.pid"), "utf8").split("\n");
  } catch {
    return undefined;
  }
  const pid = Number(lines[0]);
  const running = Number(lines[3]);
  if (!Number.isInteger(pid) || pid <= 0 || !Number.isInteger(running) || running === port) return undefined;
  try {
    process.kill(pid, 0);
  } catch (err) {
    // EPERM: alive but another user's (the postgres OS user when this runs as root).
    if ((err as { code?: string }).code !== "EPERM") return undefined;
  }
  return running;
}
