// Edge file: the database of a long-running command (serve, worker, dispatch) at start: opened,
// waited for, migrated; a stop during start-up releases it; a failure ends the process with one line.
import { isDatabaseUnavailable, type Db, type Pooler } from "../db/db.ts";
import { readMigrateOnStart, schemaAtStart } from "../db/migrate.ts";
import { hiddenPoolerProblem } from "../db/pooler-check.ts";
import { databaseTls } from "./database-tls.ts";
import { waitForDatabase } from "../db/wait-for-database.ts";
import { openDatabase, type DatabaseHandle } from "./database.ts";
import { loadAppMigrations, loadMigrations } from "./migrations-fs.ts";
import { ensurePartitions } from "../inbox/partitions.ts";

/** How long a failed start waits for a stop signal that may be on its way, ms (see openReadyDatabase). */
const STOP_GRACE_MS = 250;

/** A database that answers and has every migration: the handle, the command's pool, what was applied. */
export interface ReadyDatabase {
  database: DatabaseHandle;
  db: Db;
  /** Migrations applied by this start, e.g. `["0009_resolve"]`. */
  applied: string[];
  /** Migrations the code has (the schema version `/readyz` expects). */
  schemaVersion: number;
}

/** Options of {@link openReadyDatabase}. */
export interface ReadyDatabaseOptions {
  /** Names the command in messages, e.g. `webhook-inbox worker`. */
  command: string;
  env: Record<string, string | undefined>;
  /** Opens the command's pool on the URL (lazy: nothing is contacted until the first query). */
  connect: (url: string) => Db;
  /** Stop requested (SIGTERM/SIGINT): must be wired before this is called. */
  signal: AbortSignal;
  /** Longest wait for the database to answer, ms (`DATABASE_WAIT_MS`). */
  waitMs: number;
  /** `DATABASE_POOLER`: unless `transaction`, a transaction pooler found behind the URL refuses the start. */
  pooler: Pooler;
}

/** Attempts of the migrations when the database connection is lost during them. */
const MIGRATE_TRIES = 3;

/**
 * Opens the database ({@link openDatabase}: `DATABASE_URL`, or the embedded server, started here when
 * not running), connects, waits until it answers ({@link waitForDatabase}: one line on stderr per failed
 * attempt, up to `waitMs`), refuses a transaction pooler `DATABASE_POOLER` does not declare (see
 * pooler-check.ts), then applies pending migrations, the package's and then the app's (or, with
 * `MIGRATE_ON_START=false`, only checks that none is pending: src/db/migrate.ts schemaAtStart; waiting again and retrying, up to three
 * attempts, when the connection is lost during them), and creates the payload partitions ahead
 * (ensurePartitions). Resolves null when `signal` was aborted
 * meanwhile, once its pool is closed (an embedded server it started keeps running: see openDatabase).
 * On any other failure it prints one line, `Cannot start <command>: <why>`, to stderr (no stack trace,
 * never the URL or password), releases what it opened and exits the process with status 1.
 */
export async function openReadyDatabase(options: ReadyDatabaseOptions): Promise<ReadyDatabase | null> {
  const { signal } = options;
  let database: DatabaseHandle | undefined;
  let db: Db | undefined;
  const release = async () => {
    await db?.end({ timeout: 1 }).catch(() => {});
  };
  try {
    database = await openDatabase(options.env, { signal });
    db = options.connect(database.url);
    const wait = { limitMs: options.waitMs, signal, log: (line: string) => console.error(line) };
    await waitForDatabase(db, wait);
    // Before the first transaction (the migrations): behind an undeclared transaction pooler, refuse.
    if (!database.embedded) {
      const problem = await hiddenPoolerProblem(database.url, options.pooler, databaseTls(database.url));
      if (problem !== undefined) throw new Error(problem);
    }
    const migrations = loadMigrations();
    const app = loadAppMigrations();
    const migrateOnStart = readMigrateOnStart(options.env);
    // A connection lost during the migrations (a server another command is still starting or
    // restarting) is waited for again, like at start: the migrations commit as one transaction, so a
    // retry applies only what is still pending.
    let applied: string[] = [];
    for (let attempt = 1; ; attempt++) {
      try {
        applied = await schemaAtStart(db, migrations, app, migrateOnStart);
        break;
      } catch (err) {
        if (!isDatabaseUnavailable(err) || attempt >= MIGRATE_TRIES || signal.aborted) throw err;
        console.error(
          `${options.command}: lost the database during migrations (${err instanceof Error ? err.message : String(err)}); waiting for it`,
        );
        await waitForDatabase(db, wait);
      }
    }
    // The weekly payload partitions for the weeks ahead (sql/0027); a spilled insert and purge make them too.
    await ensurePartitions(db);
    signal.throwIfAborted();
    return { database, db, applied, schemaVersion: migrations.length };
  } catch (err) {
    await release();
    // A stop sent to the whole process group also kills the helpers the embedded server's start runs
    // (its OS-user lookup, initdb), and their failure can reach us before our own signal handler has
    // run: give a pending stop a moment to arrive, so a stop is never reported as a failed start.
    if (!signal.aborted) await new Promise((resolve) => setTimeout(resolve, STOP_GRACE_MS));
    if (signal.aborted) return null;
    console.error(`Cannot start ${options.command}: ${err instanceof Error ? err.message : String(err)}`);
    process.exit(1);
  }
}
