// Edge file: runs pgbench (Debian's PostgreSQL client tools) for `bun run bench`.
import { spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

/**
 * Debian's versioned pgbench binaries (/usr/lib/postgresql/<major>/bin/pgbench), newest major first:
 * absolute paths to try after PATH (Debian 12 ships pgbench in postgresql-15, outside PATH's wrapper).
 */
export function pgbenchCandidates(): string[] {
  const root = "/usr/lib/postgresql";
  const majors = existsSync(root)
    ? readdirSync(root)
        .filter((d) => /^\d+$/.test(d))
        .sort((a, b) => Number(b) - Number(a))
    : [];
  return majors.map((major) => join(root, major, "bin", "pgbench")).filter((path) => existsSync(path));
}

/**
 * The path of a pgbench binary: PGBENCH_BIN when set (used as given, never replaced), else pgbench on
 * PATH or a Debian versioned one, installing Debian's packages when none is on the machine
 * (`postgresql-client`, then `postgresql-15`, which carries pgbench on Debian 12).
 * @throws Error when PGBENCH_BIN does not run, or when none can be found or installed.
 */
export function ensurePgbench(log: (line: string) => void): string {
  const override = process.env.PGBENCH_BIN;
  const runs = (path: string) => spawnSync(path, ["--version"], { stdio: "ignore" }).status === 0;
  if (override) {
    if (runs(override)) return override;
    throw new Error(`Cannot run pgbench: PGBENCH_BIN=${override} does not run`);
  }
  const found = () => [Bun.which("pgbench"), ...pgbenchCandidates()].find((path): path is string => !!path && runs(path)) ?? "";
  let path = found();
  if (path) return path;
  for (const pkg of ["postgresql-client", "postgresql-15"]) {
    log(`pgbench not found: installing Debian package ${pkg}`);
    spawnSync("sh", ["-c", `(apt-get update -qq || true) && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq ${pkg}`], {
      stdio: "inherit",
    });
    path = found();
    if (path) return path;
  }
  throw new Error("Cannot find or install pgbench (apt-get install postgresql-client; on Debian 12 postgresql-15)");
}

/** One pgbench measurement: transactions per second and mean latency (ms). */
export interface PgbenchResult {
  tps: number;
  latencyMs: number;
}

/**
 * Runs `pgbench -n -M prepared -c clients -j min(clients, 4) -T seconds -f script url` and parses its
 * summary (`tps = …`, `latency average = … ms`). `script` is pgbench script text.
 * @throws Error with pgbench's output when it fails or prints no tps.
 */
export function runPgbench(bin: string, url: string, script: string, clients: number, seconds: number): PgbenchResult {
  const dir = mkdtempSync(join(tmpdir(), "webhook-inbox-pgbench-"));
  let text: string;
  let status: number | null;
  try {
    const file = join(dir, "script.sql");
    writeFileSync(file, script);
    const out = spawnSync(
      bin,
      ["-n", "-M", "prepared", "-c", String(clients), "-j", String(Math.min(clients, 4)), "-T", String(seconds), "-f", file, url],
      { encoding: "utf8" },
    );
    text = `${out.stdout}\n${out.stderr}`;
    status = out.status;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
  const tps = /tps = ([\d.]+)/.exec(text)?.[1];
  const latency = /latency average = ([\d.]+) ms/.exec(text)?.[1];
  if (status !== 0 || !tps) throw new Error(`pgbench failed (exit ${status}):\n${text.slice(-2000)}`);
  return { tps: Number(tps), latencyMs: Number(latency ?? 0) };
}
