// Test support: finds a machine binary a test needs (pgbench), and decides between a named skip and a
// failure when it is absent. Tests never install packages; .ci/run does, and makes absence a failure.
import { spawnSync } from "node:child_process";

type Env = Record<string, string | undefined>;

/** `pgbench` → `PGBENCH`: the stem of the binary's environment variables. */
const stem = (name: string) => name.toUpperCase().replace(/[^A-Z0-9]/g, "_");

/**
 * The path of a working `name` binary: one that exits 0 on `--version` (Debian's /usr/bin wrappers
 * exist without the versioned binary behind them). `<NAME>_BIN` (e.g. PGBENCH_BIN), when set, is the
 * only path tried, so pointing it at a missing file makes the binary absent. Otherwise `name` on PATH,
 * then `candidates` (absolute paths) in order. Returns undefined when none works.
 */
export function findBinary(name: string, candidates: string[] = [], env: Env = process.env): string | undefined {
  const override = env[`${stem(name)}_BIN`];
  const paths = override ? [override] : [Bun.which(name, { PATH: env.PATH ?? "" }), ...candidates];
  return paths.find((path): path is string => !!path && spawnSync(path, ["--version"], { stdio: "ignore" }).status === 0);
}

/**
 * Undefined when `name` is found (findBinary); otherwise the skip reason, naming the binary and
 * `installHint`. Where it is required (`REQUIRE_<NAME>=1`, as .ci/run exports, or `CI=true`), throws
 * that reason instead, so an absent binary fails the run rather than skipping green.
 * @throws Error when the binary is absent and required.
 */
export function binaryMissing(name: string, installHint: string, candidates: string[] = [], env: Env = process.env): string | undefined {
  if (findBinary(name, candidates, env)) return undefined;
  const override = env[`${stem(name)}_BIN`];
  const reason = `${name} is not installed${override ? ` (${stem(name)}_BIN=${override} does not run)` : ""}: ${installHint}`;
  if (env[`REQUIRE_${stem(name)}`] === "1" || env.CI === "true") throw new Error(`${reason} (required here: REQUIRE_${stem(name)}=1 or CI=true)`);
  return reason;
}
