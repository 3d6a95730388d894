// Test helper: tests that need a program outside npm (PgBouncer, pgbench) run when it is installed,
// show one skip saying how to install it when it is not, and fail instead of skipping where it is
// required (CI, which installs it).
import { test } from "bun:test";
import { accessSync, constants } from "node:fs";
import { delimiter, join } from "node:path";

type Env = Record<string, string | undefined>;

/** The override variable of a program: `pgbouncer` → `PGBOUNCER_BIN`. */
function binVariable(name: string): string {
  return `${upper(name)}_BIN`;
}

/** The variable that makes a program required: `pgbouncer` → `REQUIRE_PGBOUNCER`. */
function requireVariable(name: string): string {
  return `REQUIRE_${upper(name)}`;
}

function upper(name: string): string {
  return name.toUpperCase().replace(/[^A-Z0-9]/g, "_");
}

function executable(path: string): boolean {
  try {
    accessSync(path, constants.X_OK);
    return true;
  } catch {
    return false;
  }
}

/**
 * The path of program `name`, or undefined. `<NAME>_BIN` (e.g. `PGBOUNCER_BIN`) overrides the search:
 * that file when it is executable, else nothing (so a test can hide an installed program). Otherwise
 * the first executable `name` in PATH, then in `/usr/sbin`, `/usr/local/sbin` (Debian installs
 * daemons there, outside a non-root PATH), then in `extraDirs` (glob-free directories).
 */
export function findBinary(name: string, env: Env = process.env, extraDirs: readonly string[] = []): string | undefined {
  const override = env[binVariable(name)];
  if (override !== undefined) return executable(override) ? override : undefined;
  const dirs = [...(env.PATH ?? "").split(delimiter).filter(Boolean), "/usr/sbin", "/usr/local/sbin", ...extraDirs];
  return dirs.map((dir) => join(dir, name)).find(executable);
}

/** True where a missing program must fail the run: `CI` is set (and not `false`/`0`), or `REQUIRE_<NAME>=1`. */
export function binaryRequired(name: string, env: Env = process.env): boolean {
  const ci = env.CI;
  return (ci !== undefined && ci !== "" && ci !== "false" && ci !== "0") || env[requireVariable(name)] === "1";
}

/**
 * Registers `suite(path)` when program `name` is found ({@link findBinary}). Otherwise registers ONE
 * test named for what is missing and how to install it (`installHint`, e.g. `apt-get install
 * pgbouncer`): skipped on a developer's machine, failing where {@link binaryRequired}. `extraDirs`
 * as in {@link findBinary} (e.g. `/usr/lib/postgresql/17/bin`).
 */
export function requireBinary(name: string, installHint: string, suite: (path: string) => void, options: { env?: Env; extraDirs?: readonly string[] } = {}): void {
  const env = options.env ?? process.env;
  const path = findBinary(name, env, options.extraDirs);
  if (path !== undefined) return suite(path);
  const message = `${name} is not installed (not in PATH, /usr/sbin or ${binVariable(name)}): \`${installHint}\` runs these tests`;
  if (binaryRequired(name, env)) {
    test(`${name} is required here (CI or ${requireVariable(name)}=1)`, () => {
      throw new Error(message);
    });
  } else {
    test.skip(message, () => {});
  }
}
