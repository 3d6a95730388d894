// Edge file: a PostgreSQL primary and its streaming-replication standby on loopback, for the failover test
// (test/system/failover.test.ts) and `bun run chaos --faults failover` (node:child_process, node:net, /proc,
// signals). The standby is a file-system copy of the primary's freshly initialised,
// cleanly stopped cluster (PostgreSQL manual, "File System Level Backup"; "Log-Shipping Standby Servers":
// standby.signal + primary_conninfo), so no pg_basebackup is needed: the embedded PostgreSQL 18 binaries
// (initdb, pg_ctl, postgres) suffice, and Debian's packaged server is the fallback. As root, every
// PostgreSQL program runs as the OS user `postgres` (as src/runtime/dev-database.ts does).
import { execFile, execFileSync, spawnSync } from "node:child_process";
import { appendFileSync, chmodSync, cpSync, existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { arch, platform, tmpdir, userInfo } from "node:os";
import { join } from "node:path";
import { createServer, connect as tcpConnect, type Socket } from "node:net";
import { freePort } from "../runtime/embedded-postgres.ts";

/**
 * A loopback relay on a free port the standby streams through: `partition()` drops, from then on, every
 * byte the primary sends (the connection stays open, as in a network partition), so commits acknowledged
 * afterwards exist on the primary only. Replies from the standby still pass. `heal()` ends the partition
 * and closes the connections it spoiled (their clients connect again). Also the Patroni cluster's
 * (patroni-cluster.ts).
 */
export async function replicationRelay(primaryPort: number) {
  const port = await freePort();
  const sockets = new Set<Socket>();
  let partitioned = false;
  const server = createServer((client) => {
    const upstream = tcpConnect(primaryPort, "127.0.0.1");
    for (const sock of [client, upstream]) {
      sockets.add(sock);
      sock.on("error", () => (client.destroy(), upstream.destroy()));
      sock.on("close", () => (sockets.delete(sock), client.destroy(), upstream.destroy()));
    }
    client.pipe(upstream);
    upstream.on("data", (chunk) => partitioned || client.write(chunk));
  });
  await new Promise<void>((resolve) => server.listen(port, "127.0.0.1", () => resolve()));
  return {
    port,
    partition: () => void (partitioned = true),
    heal: () => {
      partitioned = false;
      for (const sock of sockets) sock.destroy();
    },
    close: () => {
      for (const sock of sockets) sock.destroy();
      server.close();
    },
  };
}

/** A directory holding `initdb`, `pg_ctl` and `postgres`, and what it is. */
export interface PostgresBinaries {
  dir: string;
  label: string;
}

/** The embedded PostgreSQL 18 binaries, else the newest Debian `/usr/lib/postgresql/<major>/bin`; undefined: none. */
export async function findBinaries(): Promise<PostgresBinaries | undefined> {
  const has = (dir: string) => ["initdb", "pg_ctl", "postgres"].every((b) => existsSync(join(dir, b)));
  try {
    const mod = (await import(`@embedded-postgres/${platform()}-${arch()}`)) as { pg_ctl: string };
    const dir = join(mod.pg_ctl, "..");
    if (has(dir)) return { dir, label: "embedded PostgreSQL 18" };
  } catch {
    // not installed for this platform: try Debian's
  }
  const majors = existsSync("/usr/lib/postgresql") ? readdirSync("/usr/lib/postgresql").sort((a, b) => Number(b) - Number(a)) : [];
  const major = majors.find((m) => has(`/usr/lib/postgresql/${m}/bin`));
  return major ? { dir: `/usr/lib/postgresql/${major}/bin`, label: `Debian PostgreSQL ${major}` } : undefined;
}

/**
 * A running pair. Ports on 127.0.0.1; `url` lists both hosts with `target_session_attrs=primary`: postgres.js
 * 3.4.9's `read-write` trusts the `default_transaction_read_only` a PostgreSQL 14+ server reports at login,
 * which is `off` on a hot standby too, so it would connect to the standby (docs/failover.md).
 */
export interface ReplicatedPair {
  primaryPort: number;
  standbyPort: number;
  url: string;
  /** A URL of one server only (no failover), e.g. to read the standby while it replays. */
  urlOf(port: number): string;
  /** The primary's postmaster pid. */
  primaryPid(): number;
  /** SIGKILLs the primary's postmaster (its backends notice and exit by themselves). */
  killPrimary(): void;
  /**
   * `pg_ctl promote -w` on the standby, run without blocking this process's event loop (the load it
   * sends goes on meanwhile); rejects with pg_ctl's output when it fails.
   */
  promote(): Promise<void>;
  /**
   * Immediate shutdown of the primary (`pg_ctl stop -m immediate`: no checkpoint, crash recovery on the
   * next start; PostgreSQL manual, "Shutting Down the Server"), then `pg_ctl start -w` on the same port.
   * The standby streams again once its WAL receiver retries (`wal_retrieve_retry_interval`, 200 ms here).
   * Only before {@link killPrimary}.
   */
  restartPrimary(): Promise<void>;
  /** From now on the standby receives nothing more from the primary (see replicationRelay). */
  partition(): void;
  /**
   * Fast shutdown of the standby (`pg_ctl stop -m fast`): under synchronous replication the primary's
   * commits then wait until {@link startStandby} (PostgreSQL manual, "Synchronous Replication").
   */
  stopStandby(): Promise<void>;
  /** Starts the stopped standby again; it streams again and confirms the waiting commits. */
  startStandby(): Promise<void>;
  /** The primary's server log file (with `logWarnings`, its WARNING lines too). */
  primaryLog: string;
  /** Stops every process the pair started (by pid) and removes its directories. */
  destroy(): void;
}

/** The uid and gid of the OS user `postgres` when this process is root (root cannot run PostgreSQL), else nothing. */
export function runAs(): { uid?: number; gid?: number } {
  if (userInfo().uid !== 0) return {};
  const id = (flag: string) => Number(execFileSync("id", [flag, "postgres"], { encoding: "utf8" }).trim());
  return { uid: id("-u"), gid: id("-g") };
}

/** Runs one PostgreSQL program (as `postgres` when root) without blocking; rejects with its output when it fails. */
function runAsync(bin: PostgresBinaries, program: string, args: string[]): Promise<void> {
  return new Promise((resolve, reject) =>
    execFile(join(bin.dir, program), args, { ...runAs(), encoding: "utf8", timeout: 60_000 }, (err, stdout, stderr) =>
      err ? reject(new Error(`${program} ${args.join(" ")} failed (${err.code ?? err.signal}): ${stderr || stdout}`)) : resolve(),
    ),
  );
}

/** Runs one PostgreSQL program (as `postgres` when root); throws with its output when it fails. */
function run(bin: PostgresBinaries, program: string, args: string[]): void {
  const r = spawnSync(join(bin.dir, program), args, { ...runAs(), encoding: "utf8", timeout: 60_000 });
  if (r.status !== 0) throw new Error(`${program} ${args.join(" ")} failed (${r.status ?? r.signal}): ${r.stderr || r.stdout}`);
}

/** The postmaster's pid from `dataDir`'s postmaster.pid, or undefined. */
export function pidOf(dataDir: string): number | undefined {
  try {
    const pid = Number(readFileSync(join(dataDir, "postmaster.pid"), "utf8").split("\n")[0]);
    return pid > 0 ? pid : undefined;
  } catch {
    return undefined;
  }
}

/** The pids whose parent is `pid` (Linux /proc). */
export function childrenOf(pid: number): number[] {
  const out: number[] = [];
  for (const name of readdirSync("/proc")) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const stat = readFileSync(`/proc/${name}/stat`, "utf8");
      if (Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]) === pid) out.push(Number(name));
    } catch {
      // exited meanwhile
    }
  }
  return out;
}

/** Sends `signal` to `pid`; a process already gone is no error. */
export function kill(pid: number, signal: NodeJS.Signals): void {
  try {
    process.kill(pid, signal);
  } catch {
    // already gone
  }
}

/**
 * Initialises a primary, copies it into a standby that streams from it (`application_name=standby1`),
 * starts both and waits until the standby streams. `synchronous`: the primary waits for the standby's
 * flush before a commit returns (`synchronous_standby_names = 'standby1'`, `synchronous_commit = on`:
 * PostgreSQL manual, "Synchronous Replication"); else replication is asynchronous (the default).
 * The promoted standby has no synchronous standby of its own (its commits would wait forever).
 * `logWarnings`: both servers log WARNING and worse (default FATAL only), e.g. a commit's wait for the
 * synchronous standby being cancelled.
 */
export async function startReplicatedPair(
  bin: PostgresBinaries,
  options: { synchronous: boolean; logWarnings?: boolean },
): Promise<ReplicatedPair> {
  const parent = mkdtempSync(join(tmpdir(), "webhook-inbox-failover-"));
  chmodSync(parent, 0o777);
  const primary = join(parent, "primary");
  const standby = join(parent, "standby");
  const [primaryPort, standbyPort] = [await freePort(), await freePort()];
  const started: { dir: string; pids: number[] }[] = [];
  const relay = await replicationRelay(primaryPort);
  const destroy = () => {
    relay.close();
    for (const s of started) {
      const pid = pidOf(s.dir);
      if (pid) s.pids.push(pid, ...childrenOf(pid));
      for (const p of new Set(s.pids)) kill(p, "SIGKILL");
    }
    rmSync(parent, { recursive: true, force: true });
  };
  try {
    run(bin, "initdb", ["-D", primary, "-U", "postgres", "--auth=trust", "-N"]);
    const common = [
      "listen_addresses = '127.0.0.1'",
      "fsync = off",
      "max_connections = 200",
      "wal_keep_size = '256MB'",
      `log_min_messages = ${options.logWarnings ? "warning" : "fatal"}`,
    ];
    appendFileSync(
      join(primary, "postgresql.conf"),
      [
        ...common,
        `port = ${primaryPort}`,
        `synchronous_standby_names = '${options.synchronous ? "standby1" : ""}'`,
        "synchronous_commit = on",
        "",
      ].join("\n"),
    );
    cpSync(primary, standby, { recursive: true, preserveTimestamps: true });
    if (runAs().uid !== undefined) execFileSync("chown", ["-R", "postgres:postgres", standby]);
    chmodSync(standby, 0o700);
    appendFileSync(
      join(standby, "postgresql.conf"),
      [
        `port = ${standbyPort}`,
        "synchronous_standby_names = ''",
        "wal_retrieve_retry_interval = '200ms'",
        `primary_conninfo = 'host=127.0.0.1 port=${relay.port} user=postgres application_name=standby1'`,
        "",
      ].join("\n"),
    );
    writeFileSync(join(standby, "standby.signal"), "");
    if (runAs().uid !== undefined) execFileSync("chown", ["postgres:postgres", join(standby, "standby.signal")]);
    for (const [dir, port] of [
      [primary, primaryPort],
      [standby, standbyPort],
    ] as const) {
      started.push({ dir, pids: [] });
      const log = join(parent, `${port}.log`);
      try {
        run(bin, "pg_ctl", ["start", "-D", dir, "-l", log, "-w", "-t", "60", "-s"]);
      } catch (err) {
        const said = existsSync(log) ? readFileSync(log, "utf8").trim().split("\n").slice(-6).join("\n") : "";
        throw new Error(`${(err as Error).message}\nPostgreSQL said:\n${said}`);
      }
    }
  } catch (err) {
    destroy();
    throw err;
  }
  const urlOf = (port: number) => `postgres://postgres@127.0.0.1:${port}/postgres`;
  let primaryPostmaster = pidOf(primary)!;
  return {
    primaryPort,
    standbyPort,
    url: `postgres://postgres@127.0.0.1:${primaryPort},127.0.0.1:${standbyPort}/postgres?target_session_attrs=primary`,
    urlOf,
    primaryPid: () => primaryPostmaster,
    killPrimary() {
      primaryPostmaster = pidOf(primary) ?? primaryPostmaster;
      started[0]!.pids.push(primaryPostmaster, ...childrenOf(primaryPostmaster));
      kill(primaryPostmaster, "SIGKILL");
    },
    promote: () => runAsync(bin, "pg_ctl", ["promote", "-D", standby, "-w", "-t", "60", "-s"]),
    async restartPrimary() {
      await runAsync(bin, "pg_ctl", ["stop", "-D", primary, "-m", "immediate", "-w", "-t", "60", "-s"]);
      await runAsync(bin, "pg_ctl", ["start", "-D", primary, "-l", join(parent, `${primaryPort}.log`), "-w", "-t", "60", "-s"]);
      primaryPostmaster = pidOf(primary) ?? primaryPostmaster;
    },
    partition: relay.partition,
    stopStandby: () => runAsync(bin, "pg_ctl", ["stop", "-D", standby, "-m", "fast", "-w", "-t", "60", "-s"]),
    startStandby: () => runAsync(bin, "pg_ctl", ["start", "-D", standby, "-l", join(parent, `${standbyPort}.log`), "-w", "-t", "60", "-s"]),
    primaryLog: join(parent, `${primaryPort}.log`),
    destroy,
  };
}
