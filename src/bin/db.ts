// Entry file: `bun run db:status|db:start|db:stop|db:reset`: the embedded development PostgreSQL that
// every command of this checkout shares (src/runtime/dev-database.ts). It never touches DATABASE_URL's server.
// Exit codes: 0 done (status: running), 1 a failure, 2 usage, 3 status: not running (pg_ctl's code).
import postgres from "postgres";
import { existsSync, readdirSync, rmSync } from "node:fs";
import { join } from "node:path";
import { DATA_DIR } from "../runtime/database.ts";
import { commandLine } from "../runtime/command-name.ts";
import {
  devDatabaseOf,
  devDatabaseUrl,
  runningPostmaster,
  startDevDatabase,
  stopDevDatabase,
  withStartLock,
  type DevDatabase,
} from "../runtime/dev-database.ts";

const USAGE = `Usage: ${commandLine("db:<command>")}
  status  whether the embedded PostgreSQL runs, its port, and a psql line to paste
  start   start it (any command that needs it starts it too)
  stop    stop it (fast shutdown: open transactions roll back)
  reset   stop it and delete its data directory: every inbox row, ledger entry and outbox message in it
          (refused while other commands are connected; --force resets anyway: restart them after)
Settings: EMBEDDED_PG_DIR (default .data/postgres), EMBEDDED_PG_PORT (default 54329).`;

/** The lines `db:status` prints for a server running on `dev.dir` at `port` with `pid`. */
function runningLines(dev: DevDatabase, pid: number, port: number): string[] {
  const url = devDatabaseUrl(port);
  return [
    `embedded PostgreSQL: running (pid ${pid}) on 127.0.0.1:${port}, data in ${dev.dir}`,
    `  psql '${url}'`,
    `  DATABASE_URL=${url}   (what the commands use when DATABASE_URL is unset)`,
    `  log: ${dev.logFile}`,
    `  ${commandLine("db:stop")} stops it`,
    ...(port !== dev.port && process.env.EMBEDDED_PG_PORT !== undefined
      ? [`  it runs on ${port}, not EMBEDDED_PG_PORT ${dev.port}: leave EMBEDDED_PG_PORT unset (the commands find it) or set it to ${port}`]
      : []),
  ];
}

/** Client connections to the server at `url` other than this one's (0 when it cannot be asked). */
async function otherConnections(url: string): Promise<number> {
  const sql = postgres(url, { max: 1, connect_timeout: 5, onnotice: () => {} });
  try {
    const [row] = await sql<{ n: number }[]>`
      select count(*)::int as n from pg_stat_activity where backend_type = 'client backend' and pid <> pg_backend_pid()
    `;
    return row?.n ?? 0;
  } catch {
    return 0;
  } finally {
    await sql.end({ timeout: 1 });
  }
}

/** Runs one command; resolves its exit code. */
async function run(command: string | undefined, env: Record<string, string | undefined>): Promise<number> {
  if (command === undefined || !["status", "start", "stop", "reset"].includes(command)) {
    console.error(command === undefined || command === "--help" ? USAGE : `Unknown command "${command}"\n${USAGE}`);
    return command === "--help" ? 0 : 2;
  }
  const dev = devDatabaseOf(env, join(DATA_DIR, "postgres"));
  if (env.DATABASE_URL) console.error("DATABASE_URL is set: the commands use that server; this is about the embedded one only");
  const postmaster = runningPostmaster(dev.dir);
  switch (command) {
    case "status":
      if (postmaster === undefined) {
        console.log(
          `embedded PostgreSQL: not running (data in ${dev.dir}${existsSync(join(dev.dir, "PG_VERSION")) ? "" : ", not created yet"}); ${commandLine("db:start")} or any command starts it`,
        );
        return 3;
      }
      console.log(runningLines(dev, postmaster.pid, postmaster.port).join("\n"));
      return 0;
    case "start": {
      if (postmaster === undefined) {
        await withStartLock(dev.dir, async () => {
          if (runningPostmaster(dev.dir) === undefined) await startDevDatabase(dev);
        });
      }
      const started = runningPostmaster(dev.dir)!;
      console.log(runningLines(dev, started.pid, started.port).join("\n"));
      return 0;
    }
    case "stop":
      console.log(
        (await stopDevDatabase(dev.dir)) ? `embedded PostgreSQL stopped (data kept in ${dev.dir})` : "embedded PostgreSQL: not running",
      );
      return 0;
    default: {
      // reset: only a data directory that is a cluster (or empty) is deleted; anything else is refused.
      const entries = existsSync(dev.dir) ? readdirSync(dev.dir) : [];
      if (entries.length > 0 && !entries.includes("PG_VERSION")) {
        console.error(`Cannot reset: ${dev.dir} is not a PostgreSQL data directory (no PG_VERSION); nothing deleted`);
        return 1;
      }
      // A serve or worker still connected would find an empty database without tables after the next start.
      const others = postmaster === undefined ? 0 : await otherConnections(devDatabaseUrl(postmaster.port));
      if (others > 0 && !process.argv.includes("--force")) {
        console.error(
          `Cannot reset: ${others} other connection(s) to the embedded PostgreSQL (a running serve, worker, dispatch or psql?): stop them first, or run ${commandLine("db:reset")} --force and restart them after`,
        );
        return 1;
      }
      await withStartLock(dev.dir, async () => {
        await stopDevDatabase(dev.dir);
        rmSync(dev.dir, { recursive: true, force: true });
      });
      console.log(`embedded PostgreSQL reset: ${dev.dir} deleted; the next command starts a new, empty database`);
      return 0;
    }
  }
}

const [command, ...flags] = process.argv.slice(2);
if (command === "-h" || flags.some((f) => f === "--help" || f === "-h")) {
  console.log(USAGE); // before anything is started, stopped or deleted
  process.exit(0);
}
const unknown = flags.filter((f) => !(command === "reset" && f === "--force"));
if (unknown.length > 0) {
  console.error(`db ${command ?? ""} does not take ${unknown.map((f) => `"${f}"`).join(" ")}\n${USAGE}`);
  process.exit(2);
}
try {
  process.exitCode = await run(command, process.env);
} catch (err) {
  console.error(err instanceof Error ? err.message : String(err));
  process.exitCode = 1;
}
