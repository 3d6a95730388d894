// Edge file: a PostgreSQL cluster managed by Patroni on loopback, for test/system/patroni-failover.test.ts
// (node:child_process, node:fs, /proc, signals): a one-member etcd, three Patroni nodes (each running its
// PostgreSQL as the OS user `postgres` when this process is root), HAProxy routing to the node whose Patroni
// REST API answers `GET /primary` with 200, and the faults the test injects. Every process it starts is
// stopped by its pid in destroy(). Patroni 3.0.2 talks to etcd 3.4 through etcd's v2 API (Patroni's `etcd`
// section, "YAML Configuration Settings"; etcd started with `--enable-v2`), not the v3 one (`etcd3`): Patroni
// 3.0.2's etcd3 code renews an expired leader key by writing it without checking who holds it, so a primary
// paused past the TTL takes the key back from the node that replaced it when it wakes (the test saw it demote
// the new primary and rewind what that one had acknowledged); Patroni 3.0.3 fixed it ("Fix a problem with
// etcd3.update_leader()", #2693). The v2 code renews with a compare-and-swap on its own name. Both need only
// Debian's packages (python3-etcd). Replicas are cloned with pg_basebackup and
// a failed primary rejoins with pg_rewind, so the PostgreSQL binaries are a full server package's (Debian's
// postgresql-<major>), not the embedded build (initdb, pg_ctl and postgres only).
import { execFile, spawn, type ChildProcess } from "node:child_process";
import {
  chmodSync,
  closeSync,
  cpSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  openSync,
  readdirSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { delimiter, join } from "node:path";
import { connect } from "../db/db.ts";
import { sleep } from "../db/sleep.ts";
import { freePort } from "../runtime/embedded-postgres.ts";
import { childrenOf, kill, pidOf, replicationRelay, runAs } from "./replicated-postgres.ts";

/** Where the programs are: Patroni's two commands, etcd, HAProxy, and the PostgreSQL server's bin directory. */
export interface PatroniTools {
  patroni: string;
  patronictl: string;
  etcd: string;
  haproxy: string;
  /** `/usr/lib/postgresql/<major>/bin`, holding pg_basebackup, pg_rewind and pg_controldata besides the server. */
  pgBin: string;
}

/** The PostgreSQL programs Patroni runs (bootstrap, cloning a replica, rejoining a failed primary). */
const PG_PROGRAMS = ["initdb", "pg_ctl", "postgres", "pg_basebackup", "pg_rewind", "pg_controldata"];

/** The first `name` on PATH or in /usr/sbin, or undefined. */
function which(name: string): string | undefined {
  const dirs = [...(process.env.PATH ?? "").split(delimiter), "/usr/sbin", "/sbin"].filter((d) => d.startsWith("/"));
  return dirs.map((d) => join(d, name)).find((p) => existsSync(p));
}

/**
 * The tools a Patroni cluster needs, or what is missing, each named by its Debian package (`apt-get install
 * patroni etcd-server haproxy postgresql-15`). The newest `/usr/lib/postgresql/<major>/bin` with
 * {@link PG_PROGRAMS} is taken.
 */
export function findPatroniTools(): { tools?: PatroniTools; missing: string[] } {
  const found = { patroni: which("patroni"), patronictl: which("patronictl"), etcd: which("etcd"), haproxy: which("haproxy") };
  const majors = existsSync("/usr/lib/postgresql") ? readdirSync("/usr/lib/postgresql").sort((a, b) => Number(b) - Number(a)) : [];
  const major = majors.find((m) => PG_PROGRAMS.every((p) => existsSync(`/usr/lib/postgresql/${m}/bin/${p}`)));
  const missing = [
    ...(found.patroni && found.patronictl ? [] : ["patroni"]),
    ...(found.etcd ? [] : ["etcd-server"]),
    ...(found.haproxy ? [] : ["haproxy"]),
    ...(major ? [] : ["postgresql-15 (pg_basebackup, pg_rewind)"]),
  ];
  if (missing.length > 0) return { missing };
  return { tools: { ...(found as Omit<PatroniTools, "pgBin">), pgBin: `/usr/lib/postgresql/${major}/bin` }, missing };
}

/**
 * Patroni's timing and failover settings, written to the DCS at bootstrap (Patroni documentation, "Dynamic
 * Configuration Settings"): the leader key lives `ttl` s; each node runs its loop every `loop_wait` s and
 * retries the DCS and PostgreSQL for `retry_timeout` s (loop_wait + 2 × retry_timeout ≤ ttl, as Patroni's
 * documentation asks); `primary_start_timeout: 0` fails over at once when the primary's PostgreSQL crashes
 * instead of restarting it in place (the default, 300, restarts it); a replica up to 1 GiB behind may
 * still be promoted (`maximum_lag_on_failover`), so an asynchronous cluster fails over even to a lagging one.
 */
export const PATRONI_DCS = {
  ttl: 12,
  loop_wait: 2,
  retry_timeout: 5,
  primary_start_timeout: 0,
  maximum_lag_on_failover: 1024 * 1024 * 1024,
  synchronous_mode: true,
  synchronous_mode_strict: true,
};

/** One Patroni node: its PostgreSQL port, REST API port, the relay other nodes stream from it through, its data directory. */
export interface PatroniNode {
  name: string;
  pgPort: number;
  apiPort: number;
  /** The node's `connect_address` (what replicas and pg_rewind use): a relay to `pgPort` that {@link PatroniCluster.partition} can cut. */
  relayPort: number;
  dataDir: string;
}

/** A member as Patroni's `GET /cluster` shows it. */
export interface Member {
  name: string;
  /** `leader`, `sync_standby` or `replica`. */
  role: string;
  /** `running`, `starting`, `stopped`, `crashed`, … */
  state: string;
  timeline?: number;
  /** Bytes behind the leader's last known position, or `unknown`. */
  lag?: number | string;
}

/** A running cluster and the faults to inject into it. */
export interface PatroniCluster {
  nodes: readonly PatroniNode[];
  /** A multi-host URL of `database` listing every node with `target_session_attrs=primary` (docs/failover.md). */
  hostsUrl(database: string): string;
  /** A URL of `database` through HAProxy, which routes to the node whose `GET /primary` answers 200. */
  haproxyUrl(database: string): string;
  /** A URL of `database` on one node only. */
  nodeUrl(name: string, database: string): string;
  /** The members from the first node whose REST API answers (`GET /cluster`); [] when none does. */
  members(): Promise<Member[]>;
  /** The leader's name, if there is one. */
  leader(): Promise<string | undefined>;
  /**
   * Waits until there is a leader, every node's PostgreSQL runs and streams from it (the leader's
   * pg_stat_replication), and, when `sync`, a synchronous standby is chosen; throws after `timeoutMs`
   * with what it saw.
   */
  waitHealthy(options: { sync: boolean; timeoutMs: number }): Promise<Member[]>;
  /** SIGKILL of the node's postmaster (Patroni on the node survives and sees it crashed). */
  killPostmaster(name: string): void;
  /** SIGSTOP of the node's Patroni, its postmaster and every child of it: a paused machine, not a dead one. */
  freeze(name: string): void;
  /** SIGCONT of what {@link freeze} stopped. */
  thaw(name: string): void;
  /** SIGKILL of the node's Patroni, its postmaster and every child of it: the node crashes. */
  crash(name: string): void;
  /** Starts the node's Patroni again (after {@link crash}); it starts its PostgreSQL and rejoins. */
  start(name: string): void;
  /** Stops etcd (SIGTERM, by pid), waits `downMs`, starts it again on its data directory and waits until it answers. */
  restartEtcd(downMs: number): Promise<void>;
  /** `patronictl switchover --leader <leader> --candidate <candidate> --force`; resolves with its output, rejects when it fails. */
  switchover(leader: string, candidate: string): Promise<string>;
  /** `PATCH /config` of the dynamic configuration (Patroni documentation, "REST API"), e.g. `{ synchronous_mode: false }`. */
  setConfig(patch: Record<string, unknown>): Promise<void>;
  /** From now on nothing the node sends reaches the nodes streaming from it (their relay drops it). */
  partition(name: string): void;
  /** Ends {@link partition}. */
  heal(name: string): void;
  /** The directory holding every log (etcd.log, haproxy.log, <node>.log, <node>/ its data). */
  dir: string;
  /** Stops every process the cluster started (by pid, SIGKILL) and removes its directory. */
  destroy(): void;
}

const PASSWORD = "patroni-test-only";

/**
 * Starts etcd, HAProxy and three Patroni nodes (`pg0` bootstraps the cluster, `pg1` and `pg2` are cloned
 * from it) under {@link PATRONI_DCS}, and waits until the cluster is healthy (a leader, two streaming
 * replicas, a synchronous standby). Stops everything it started when it fails.
 * @throws Error with the tail of the logs when the cluster does not become healthy within `timeoutMs`.
 */
export async function startPatroniCluster(tools: PatroniTools, options: { timeoutMs?: number } = {}): Promise<PatroniCluster> {
  const dir = mkdtempSync(join(tmpdir(), "webhook-inbox-patroni-"));
  chmodSync(dir, 0o777);
  const owner = runAs();
  const env = { PATH: process.env.PATH ?? "/usr/bin:/bin", HOME: dir, LANG: "C.UTF-8" };
  const processes = new Map<string, ChildProcess>();
  const frozen = new Map<string, number[]>();
  const [etcdClient, etcdPeer, haproxyPort] = [await freePort(), await freePort(), await freePort()];
  const nodes: PatroniNode[] = [];
  const relays = new Map<string, Awaited<ReturnType<typeof replicationRelay>>>();
  for (const name of ["pg0", "pg1", "pg2"]) {
    const [pgPort, apiPort] = [await freePort(), await freePort()];
    const relay = await replicationRelay(pgPort);
    nodes.push({ name, pgPort, apiPort, relayPort: relay.port, dataDir: join(dir, name) });
    relays.set(name, relay);
  }
  const node = (name: string) => nodes.find((n) => n.name === name) ?? fail(`No node ${name}`);
  const logTo = (file: string) => openSync(join(dir, file), "a");
  const launch = (key: string, command: string, args: string[], asPostgres: boolean) => {
    const fd = logTo(`${key}.log`);
    const child = spawn(command, args, { env, stdio: ["ignore", fd, fd], ...(asPostgres ? owner : {}) });
    closeSync(fd);
    child.on("error", () => {});
    processes.set(key, child);
    return child;
  };

  // etcd: one member on loopback, its v3 API on etcdClient.
  const etcdData = join(dir, "etcd");
  const etcdArgs = [
    "--name=e0",
    `--data-dir=${etcdData}`,
    `--listen-client-urls=http://127.0.0.1:${etcdClient}`,
    `--advertise-client-urls=http://127.0.0.1:${etcdClient}`,
    `--listen-peer-urls=http://127.0.0.1:${etcdPeer}`,
    `--initial-advertise-peer-urls=http://127.0.0.1:${etcdPeer}`,
    `--initial-cluster=e0=http://127.0.0.1:${etcdPeer}`,
    "--initial-cluster-state=new",
    "--enable-v2=true",
  ];
  const etcdUp = async (timeoutMs: number) => {
    const deadline = Date.now() + timeoutMs;
    while (Date.now() < deadline) {
      const ok = await fetch(`http://127.0.0.1:${etcdClient}/health`, { signal: AbortSignal.timeout(1_000) })
        .then(async (r) => r.ok && ((await r.json()) as { health?: string }).health === "true")
        .catch(() => false);
      if (ok) return;
      await sleep(100);
    }
    throw new Error(`etcd did not answer /health within ${timeoutMs} ms (see ${join(dir, "etcd.log")})`);
  };

  const configFile = (n: PatroniNode) => join(dir, `${n.name}.yml`);
  const writeConfig = (n: PatroniNode) => {
    // JSON is YAML (Patroni reads its file with yaml.safe_load).
    const config = {
      scope: "inbox",
      namespace: "/webhook-inbox-test/",
      name: n.name,
      log: { level: "INFO" },
      restapi: { listen: `127.0.0.1:${n.apiPort}`, connect_address: `127.0.0.1:${n.apiPort}` },
      etcd: { hosts: [`127.0.0.1:${etcdClient}`] },
      bootstrap: {
        dcs: {
          ...PATRONI_DCS,
          postgresql: {
            use_pg_rewind: true,
            use_slots: true,
            parameters: {
              wal_log_hints: "on",
              max_connections: 200,
              max_wal_senders: 10,
              max_replication_slots: 10,
              wal_keep_size: "256MB",
              fsync: "off",
              log_min_messages: "warning",
            },
          },
        },
        initdb: [{ encoding: "UTF8" }, { locale: "C.UTF-8" }],
      },
      postgresql: {
        listen: `127.0.0.1:${n.pgPort}`,
        connect_address: `127.0.0.1:${n.relayPort}`,
        data_dir: n.dataDir,
        bin_dir: tools.pgBin,
        pgpass: join(dir, `${n.name}.pgpass`),
        authentication: {
          superuser: { username: "postgres", password: PASSWORD },
          replication: { username: "replicator", password: PASSWORD },
        },
        pg_hba: ["local all all trust", "host all all 127.0.0.1/32 trust", "host replication all 127.0.0.1/32 trust"],
        parameters: { unix_socket_directories: dir },
      },
    };
    writeFileSync(configFile(n), JSON.stringify(config, null, 2));
    chmodSync(configFile(n), 0o644);
  };
  const startNode = (name: string) => launch(name, tools.patroni, [configFile(node(name))], true);

  const api = async <T>(n: PatroniNode, path: string, init?: RequestInit): Promise<T | undefined> =>
    fetch(`http://127.0.0.1:${n.apiPort}${path}`, { ...init, signal: AbortSignal.timeout(1_500) })
      .then(async (r) => (r.ok ? ((await r.json()) as T) : undefined))
      .catch(() => undefined);
  const members = async (): Promise<Member[]> => {
    for (const n of nodes) {
      const cluster = await api<{ members: Member[] }>(n, "/cluster");
      if (cluster) return cluster.members;
    }
    return [];
  };
  const leader = async () => (await members()).find((m) => m.role === "leader")?.name;
  const nodeUrl = (name: string, database: string) => `postgres://postgres@127.0.0.1:${node(name).pgPort}/${database}`;
  /** How many replicas stream from node `name`, or why that cannot be read. */
  const streaming = async (name: string): Promise<number | string> => {
    const db = connect(nodeUrl(name, "postgres"), { max: 1, connectTimeoutSec: 2 });
    try {
      const [row] = await db<{ n: number }[]>`select count(*)::int as n from pg_stat_replication where state = 'streaming'`;
      return row?.n ?? 0;
    } catch (err) {
      return String(err);
    } finally {
      await db.end({ timeout: 1 });
    }
  };
  /** The last lines of each node's Patroni log, for a failure message. */
  const tails = () =>
    nodes
      .map((n) => {
        const log = join(dir, `${n.name}.log`);
        // Patroni's own lines (a timestamp first), not the tracebacks of health checks HAProxy closed early.
        const lines = existsSync(log)
          ? readFileSync(log, "utf8")
              .split("\n")
              .filter((l) => /^\d{4}-\d\d-\d\d /.test(l))
              .slice(-12)
          : [];
        return `${n.name}.log:\n${lines.join("\n")}`;
      })
      .join("\n");
  const waitHealthy = async (o: { sync: boolean; timeoutMs: number }) => {
    const deadline = Date.now() + o.timeoutMs;
    let seen: Member[] = [];
    let streams: number | string = "not read";
    while (Date.now() < deadline) {
      seen = await members();
      const lead = seen.find((m) => m.role === "leader");
      const ready =
        lead !== undefined &&
        seen.length === nodes.length &&
        seen.every((m) => m.state === "running") &&
        (!o.sync || seen.some((m) => m.role === "sync_standby"));
      if (ready && (streams = await streaming(lead.name)) === nodes.length - 1) return seen;
      await sleep(250);
    }
    throw new Error(
      `The Patroni cluster is not healthy after ${o.timeoutMs} ms: members ${JSON.stringify(seen)}, streaming ${streams}\n${tails()}`,
    );
  };

  /** The node's Patroni pid, its postmaster's and every child of that postmaster (Linux /proc). */
  const pidsOf = (name: string): number[] => {
    const patroni = processes.get(name);
    const postmaster = pidOf(node(name).dataDir);
    return [
      ...(patroni?.pid !== undefined && patroni.exitCode === null ? [patroni.pid] : []),
      ...(postmaster ? [postmaster, ...childrenOf(postmaster)] : []),
    ];
  };

  const destroy = () => {
    for (const pids of frozen.values()) for (const pid of pids) kill(pid, "SIGCONT");
    for (const n of nodes) for (const pid of pidsOf(n.name)) kill(pid, "SIGKILL");
    for (const child of processes.values()) if (child.pid !== undefined && child.exitCode === null) kill(child.pid, "SIGKILL");
    for (const relay of relays.values()) relay.close();
    // PATRONI_DEBUG_COPY=<dir>: keep a copy of every log (docs/testing.md) before the directory goes.
    const copy = process.env.PATRONI_DEBUG_COPY;
    if (copy) {
      try {
        cpSync(dir, copy, { recursive: true, filter: (path) => !/\.s\.PGSQL\.\d+$/.test(path) }); // not the sockets
      } catch {
        // a copy for debugging: the cleanup below goes on without it
      }
    }
    rmSync(dir, { recursive: true, force: true });
  };

  try {
    mkdirSync(etcdData, { mode: 0o700 });
    launch("etcd", tools.etcd, etcdArgs, false);
    await etcdUp(20_000);
    const haproxyConfig = join(dir, "haproxy.cfg");
    writeFileSync(
      haproxyConfig,
      [
        "global",
        "  maxconn 400",
        "defaults",
        "  mode tcp",
        "  timeout connect 2s",
        "  timeout client 30m",
        "  timeout server 30m",
        "  timeout check 1s",
        "listen primary",
        `  bind 127.0.0.1:${haproxyPort}`,
        "  option httpchk GET /primary",
        "  http-check expect status 200",
        "  default-server inter 500ms fall 2 rise 1 on-marked-down shutdown-sessions",
        ...nodes.map((n) => `  server ${n.name} 127.0.0.1:${n.pgPort} maxconn 200 check port ${n.apiPort}`),
        "",
      ].join("\n"),
    );
    launch("haproxy", tools.haproxy, ["-f", haproxyConfig, "-db"], false);
    for (const n of nodes) writeConfig(n);
    startNode("pg0");
    const bootstrapped = Date.now() + (options.timeoutMs ?? 120_000);
    while (!(await api(nodes[0]!, "/primary"))) {
      if (Date.now() > bootstrapped) throw new Error(`pg0 did not bootstrap the cluster (logs in ${dir})`);
      await sleep(250);
    }
    startNode("pg1");
    startNode("pg2");
    await waitHealthy({ sync: true, timeoutMs: Math.max(1_000, bootstrapped - Date.now()) });
  } catch (err) {
    destroy();
    throw err;
  }

  return {
    nodes,
    dir,
    hostsUrl: (database) =>
      `postgres://postgres@${nodes.map((n) => `127.0.0.1:${n.pgPort}`).join(",")}/${database}?target_session_attrs=primary`,
    haproxyUrl: (database) => `postgres://postgres@127.0.0.1:${haproxyPort}/${database}`,
    nodeUrl,
    members,
    leader,
    waitHealthy,
    killPostmaster(name) {
      const pid = pidOf(node(name).dataDir);
      if (pid) kill(pid, "SIGKILL");
    },
    freeze(name) {
      const pids = pidsOf(name);
      frozen.set(name, pids);
      for (const pid of pids) kill(pid, "SIGSTOP");
    },
    thaw(name) {
      for (const pid of frozen.get(name) ?? []) kill(pid, "SIGCONT");
      frozen.delete(name);
    },
    crash(name) {
      for (const pid of pidsOf(name)) kill(pid, "SIGKILL");
    },
    start: (name) => void startNode(name),
    async restartEtcd(downMs) {
      const etcd = processes.get("etcd");
      if (etcd?.pid !== undefined && etcd.exitCode === null) {
        const exited = new Promise((resolve) => etcd.once("exit", resolve));
        kill(etcd.pid, "SIGTERM");
        await Promise.race([exited, sleep(10_000)]);
        if (etcd.exitCode === null) kill(etcd.pid, "SIGKILL");
      }
      await sleep(downMs);
      launch("etcd", tools.etcd, etcdArgs, false);
      await etcdUp(20_000);
    },
    switchover: (from, to) =>
      new Promise((resolve, reject) =>
        execFile(
          tools.patronictl,
          ["-c", configFile(nodes[0]!), "switchover", "--leader", from, "--candidate", to, "--force"],
          { env, encoding: "utf8", timeout: 60_000 },
          (err, stdout, stderr) => (err ? reject(new Error(`patronictl switchover failed: ${stderr || stdout}`)) : resolve(stdout)),
        ),
      ),
    async setConfig(patch) {
      for (const n of nodes) {
        const ok = await fetch(`http://127.0.0.1:${n.apiPort}/config`, {
          method: "PATCH",
          headers: { "content-type": "application/json" },
          body: JSON.stringify(patch),
          signal: AbortSignal.timeout(5_000),
        })
          .then((r) => r.ok)
          .catch(() => false);
        if (ok) return;
      }
      throw new Error(`No Patroni node accepted PATCH /config ${JSON.stringify(patch)}`);
    },
    partition: (name) => relays.get(name)?.partition(),
    heal: (name) => relays.get(name)?.heal(),
    destroy,
  };
}

function fail(message: string): never {
  throw new Error(message);
}
