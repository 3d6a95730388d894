// `--help` on a command that acts (serve, migrate, db stop|reset) prints its usage and does nothing else:
// `db reset --help` once deleted the development database, `serve --help` started a receiver and migrated.
import { afterAll, expect, test } from "bun:test";
import { spawnSync } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";

const ROOT = fileURLToPath(new URL("../../", import.meta.url));
const CLI = join(ROOT, "src", "bin", "webhook-inbox.ts");
const work = mkdtempSync(join(tmpdir(), "command-help-"));
afterAll(() => rmSync(work, { recursive: true, force: true }));

function cli(args: string[], env: Record<string, string> = {}) {
  // An unreachable DATABASE_URL: a command that tried to connect would fail, not print its usage.
  const r = spawnSync(process.execPath, [CLI, ...args], {
    cwd: work,
    encoding: "utf8",
    timeout: 20_000,
    env: { ...process.env, DATABASE_URL: "postgres://nobody:nothing@127.0.0.1:1/none", ...env },
  });
  return { status: r.status, stdout: r.stdout, stderr: r.stderr };
}

test("`webhook-inbox db reset --help` and `db stop --help` print the usage and leave the data directory alone; a stray flag is exit 2", () => {
  const dir = join(work, "pg");
  mkdirSync(dir);
  writeFileSync(join(dir, "PG_VERSION"), "18\n");
  for (const args of [
    ["db", "reset", "--help"],
    ["db", "stop", "-h"],
    ["db", "reset", "--force", "--help"],
  ]) {
    const r = cli(args, { EMBEDDED_PG_DIR: dir });
    expect({ args, status: r.status }).toEqual({ args, status: 0 });
    expect(r.stdout).toContain("Usage: webhook-inbox db <command>"); // named as the app runs it, not as a repository script
    expect(existsSync(join(dir, "PG_VERSION"))).toBe(true);
  }
  const stray = cli(["db", "reset", "--forse"], { EMBEDDED_PG_DIR: dir });
  expect(stray.status).toBe(2);
  expect(stray.stderr).toContain('does not take "--forse"');
  expect(existsSync(join(dir, "PG_VERSION"))).toBe(true);
});

test("`webhook-inbox serve --help` and `migrate --help` print the usage without connecting; serve with an argument is exit 2", () => {
  const serve = cli(["serve", "--help"]);
  expect(serve.status).toBe(0);
  expect(serve.stdout).toContain("Usage: bun run serve");
  expect(serve.stderr).toBe("");
  const migrate = cli(["migrate", "-h"]);
  expect(migrate.status).toBe(0);
  expect(migrate.stdout).toContain("Usage: bun run migrate");
  const stray = cli(["serve", "--port", "4000"]);
  expect(stray.status).toBe(2);
  expect(stray.stderr).toContain('serve takes no arguments, got "--port" "4000"');
});
