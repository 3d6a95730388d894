// Edge file: runs pgbench (Debian's PostgreSQL client tools) for `bun run bench`.
import { spawnSync } from "node:child_process";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

/**
 * The path of a pgbench binary, installing Debian's packages when none is on the machine
 * (`postgresql-client`, then `postgresql-15`, which carries pgbench on Debian 12).
 * @throws Error when none can be found or installed.
 */
export function ensurePgbench(log: (line: string) => void): string {
  const found = () => spawnSync("sh", ["-c", "command -v pgbench || ls /usr/lib/postgresql/*/bin/pgbench 2>/dev/null | tail -n 1"], { encoding: "utf8" }).stdout.trim().split("\n").pop() ?? "";
  let path = found();
  if (path) return path;
  for (const pkg of ["postgresql-client", "postgresql-15"]) {
    log(`pgbench not found: installing Debian package ${pkg}`);
    spawnSync("sh", ["-c", `(apt-get update -qq || true) && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq ${pkg}`], { stdio: "inherit" });
    path = found();
    if (path) return path;
  }
  throw new Error("Cannot find or install pgbench (apt-get install postgresql-client)");
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
  const file = join(dir, "script.sql");
  writeFileSync(file, script);
  const out = spawnSync(bin, ["-n", "-M", "prepared", "-c", String(clients), "-j", String(Math.min(clients, 4)), "-T", String(seconds), "-f", file, url], { encoding: "utf8" });
  const text = `${out.stdout}\n${out.stderr}`;
  const tps = /tps = ([\d.]+)/.exec(text)?.[1];
  const latency = /latency average = ([\d.]+) ms/.exec(text)?.[1];
  if (out.status !== 0 || !tps) throw new Error(`pgbench failed (exit ${out.status}):\n${text.slice(-2000)}`);
  return { tps: Number(tps), latencyMs: Number(latency ?? 0) };
}
