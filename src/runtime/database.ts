// Edge file: where the database comes from when a command starts (DATABASE_URL or embedded).
import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join, sep } from "node:path";
import { databaseUrlProblem, nodeEnvProblem, PRODUCTION_NEEDS_DATABASE_URL, readPooler } from "../config.ts";
import type { Pooler } from "../db/db.ts";
import { PACKAGE_ROOT } from "./migrations-fs.ts";
import { devDatabaseOf, devDatabaseUrl, runningPostmaster, startDevDatabase, withStartLock } from "./dev-database.ts";
import { commandLine } from "./command-name.ts";

/**
 * The development `.data/` folder (embedded cluster, dev secret), gitignored: the repository's own in a
 * checkout; in an app that installed the package (it sits under node_modules), the app's, in the
 * folder the command runs from.
 */
export const DATA_DIR = PACKAGE_ROOT.split(sep).includes("node_modules") ? join(process.cwd(), ".data") : join(PACKAGE_ROOT, ".data");

/**
 * A database to use: its URL, and whether it is the embedded development server (which is never
 * stopped by the command that used it: see {@link openDatabase}).
 */
export interface DatabaseHandle {
  url: string;
  embedded: boolean;
}

/**
 * `DATABASE_URL` when set; otherwise the embedded development PostgreSQL 18 kept in `.data/postgres`
 * (`EMBEDDED_PG_DIR`): used where it runs (the port its postmaster.pid names), started on
 * 127.0.0.1:`EMBEDDED_PG_PORT` (default 54329) when it does not (one line on stderr says so, and how
 * to stop it). It keeps running after the
 * command exits, for every other command of the checkout, until `bun run db:stop` (dev-database.ts).
 * Two commands started at once take turns (see `withStartLock`). `options.signal` is a stop requested
 * during start-up.
 * @throws Error when `DATABASE_URL` cannot be read (the message never quotes it), `EMBEDDED_PG_PORT` is
 *   not a port number, or is set and differs from the port the running server uses (naming that port), the
 *   embedded server cannot start, `NODE_ENV` is not production, development or test, or
 *   `NODE_ENV=production` comes without `DATABASE_URL`; `options.signal.reason` when stopped meanwhile.
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
    return { url: env.DATABASE_URL, embedded: false };
  }
  if (env.NODE_ENV === "production") {
    // A production receiver must never acknowledge payments into a disposable local cluster.
    throw new Error(PRODUCTION_NEEDS_DATABASE_URL);
  }
  const dev = devDatabaseOf(env, join(DATA_DIR, "postgres"));
  const handle: DatabaseHandle = { url: dev.url, embedded: true };
  // One command at a time decides between using and starting (migrate and serve started together).
  return withStartLock(
    dev.dir,
    async () => {
      const running = runningPostmaster(dev.dir);
      // The server of this data directory is found where it runs: its port is in its postmaster.pid, so a
      // command needs EMBEDDED_PG_PORT only to start it. One given another port is a conflict, said so.
      if (running !== undefined && running.port !== dev.port && env.EMBEDDED_PG_PORT !== undefined) {
        throw new Error(
          `The embedded PostgreSQL in ${dev.dir} runs on port ${running.port}, not ${dev.port} (EMBEDDED_PG_PORT): leave EMBEDDED_PG_PORT unset or set it to ${running.port}`,
        );
      }
      if (running !== undefined) return { url: devDatabaseUrl(running.port), embedded: true };
      await startDevDatabase(dev, options.signal);
      console.error(
        `Started the embedded PostgreSQL on 127.0.0.1:${dev.port} (data in ${dev.dir}); it keeps running for other commands: ${commandLine("db:stop")} stops it, ${commandLine("db:status")} shows it`,
      );
      return handle;
    },
    options.signal,
  );
}

/**
 * A development signing secret kept in `.data/dev-webhook-secret`, created on first use, so a local
 * receiver without `STRIPE_WEBHOOK_SECRET` keeps the same secret across restarts. Never used when
 * `DATABASE_URL` is set (config refuses that).
 * @throws Error when the file exists but holds no secret (see {@link readDevSecret}).
 */
export function devWebhookSecret(): string {
  const file = join(DATA_DIR, "dev-webhook-secret");
  if (existsSync(file)) return readDevSecret(file);
  const bytes = crypto.getRandomValues(new Uint8Array(24));
  const secret = `whsec_dev_${[...bytes].map((b) => b.toString(16).padStart(2, "0")).join("")}`;
  mkdirSync(DATA_DIR, { recursive: true });
  try {
    writeFileSync(file, `${secret}\n`, { mode: 0o600, flag: "wx" });
  } catch (err) {
    // Another command created it at the same moment: use that one, so both sign and verify alike.
    if ((err as { code?: unknown }).code === "EEXIST") return readDevSecret(file);
    throw err;
  }
  return secret;
}

/**
 * The development secret in `file`, trimmed.
 * @throws Error naming the file when it is empty (an editor or a failed copy emptied it): deleting it makes
 * the next command create a new one.
 */
export function readDevSecret(file: string): string {
  const secret = readFileSync(file, "utf8").trim();
  if (!secret)
    throw new Error(`${file} is empty: delete it (a new development secret is made on the next start) or set STRIPE_WEBHOOK_SECRET`);
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
