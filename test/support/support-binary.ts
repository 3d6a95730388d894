// Test support: tests that need a program outside npm (PgBouncer, pgbench) run when it is installed,
// show one skip saying how to install it when it is not, and fail instead of skipping where it is
// required (CI, whose .ci/run installs it). Tests never install packages themselves.
import { test } from "bun:test";
import { spawnSync } from "node:child_process";
import { accessSync, constants } from "node:fs";
import { delimiter, join } from "node:path";

type Env = Record<string, string | undefined>;

/** `pgbouncer` → `PGBOUNCER`: the stem of a program's environment variables. */
function stem(name: string): string {
  return name.toUpperCase().replace(/[^A-Z0-9]/g, "_");
}

/** True for an executable file that exits 0 on `--version` (Debian's /usr/bin wrappers exist without the versioned binary behind them). */
function runs(path: string): boolean {
  try {
    accessSync(path, constants.X_OK);
  } catch {
    return false;
  }
  return spawnSync(path, ["--version"], { stdio: "ignore" }).status === 0;
}

/**
 * The path of a working program `name`, or undefined. `<NAME>_BIN` (e.g. `PGBOUNCER_BIN`), when set,
 * is the only path tried, so pointing it at a missing file hides an installed program. Otherwise the
 * first working `name` in PATH, then in `/usr/sbin` and `/usr/local/sbin` (Debian installs daemons
 * there, outside a non-root PATH), then `candidates` (absolute paths, in order).
 */
export function findBinary(name: string, env: Env = process.env, candidates: readonly string[] = []): string | undefined {
  const override = env[`${stem(name)}_BIN`];
  if (override !== undefined) return runs(override) ? override : undefined;
  const dirs = [...(env.PATH ?? "").split(delimiter).filter(Boolean), "/usr/sbin", "/usr/local/sbin"];
  return [...dirs.map((dir) => join(dir, name)), ...candidates].find(runs);
}

/** True where a missing program must fail the run: `CI` is set (and not `false`/`0`), or `REQUIRE_<NAME>=1`. */
export function binaryRequired(name: string, env: Env = process.env): boolean {
  const ci = env.CI;
  return (ci !== undefined && ci !== "" && ci !== "false" && ci !== "0") || env[`REQUIRE_${stem(name)}`] === "1";
}

/** Why program `name` is missing, naming how to install it (`installHint`), or undefined when {@link findBinary} finds it. */
export function binaryMissing(
  name: string,
  installHint: string,
  env: Env = process.env,
  candidates: readonly string[] = [],
): string | undefined {
  if (findBinary(name, env, candidates) !== undefined) return undefined;
  const override = env[`${stem(name)}_BIN`];
  return `${name} is not installed (${override !== undefined ? `${stem(name)}_BIN=${override} does not run` : `not in PATH, /usr/sbin or ${stem(name)}_BIN`}): \`${installHint}\` runs these tests`;
}

/** Options of {@link requireBinary}. */
export interface RequireBinaryOptions {
  env?: Env;
  /** Absolute paths tried after PATH (see {@link findBinary}). */
  candidates?: readonly string[];
}

/**
 * Registers `suite(path)` when program `name` is found ({@link findBinary}). Otherwise registers ONE
 * test named for what is missing and how to install it (`installHint`, e.g. `apt-get install
 * pgbouncer`): skipped on a developer's machine, failing where {@link binaryRequired}.
 */
export function requireBinary(name: string, installHint: string, suite: (path: string) => void, options: RequireBinaryOptions = {}): void {
  const env = options.env ?? process.env;
  const missing = binaryMissing(name, installHint, env, options.candidates);
  if (missing === undefined) return suite(findBinary(name, env, options.candidates) as string);
  if (binaryRequired(name, env)) {
    test(`${name} is required here (CI or REQUIRE_${stem(name)}=1)`, () => {
      throw new Error(missing);
    });
  } else {
    test.skip(missing, () => {});
  }
}
