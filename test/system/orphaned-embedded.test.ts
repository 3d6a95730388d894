// An embedded PostgreSQL orphaned by a SIGKILLed command is stopped by the next command that uses it
// (src/runtime/database.ts, src/runtime/embedded-owner.ts); a server whose owner still runs is left to
// it. Real processes: `bun src/bin/serve.ts` and `bun src/bin/migrate.ts` on their own data directory.
import { afterAll, expect, test } from "bun:test";
import type { Subprocess } from "bun";
import { readFileSync } from "node:fs";
import { rm } from "node:fs/promises";
import { dirname, join } from "node:path";
import { freePort, temporaryDataDir } from "../../src/runtime/embedded-postgres.ts";
import { spawnBun, waitForLine } from "../support/bun-child.ts";
import { SECRET } from "../support/helpers.ts";
import { waitUntil } from "../support/wait-until.ts";

const tracked = new Set<Subprocess>();
const dirs = new Set<string>();
afterAll(async () => {
  for (const child of tracked) child.kill("SIGKILL");
  for (const dir of dirs) {
    const pid = postmasterOf(dir);
    if (pid !== undefined) signal(pid, "SIGQUIT");
    // A server still exiting writes into its directory: removed only once it is gone.
    await waitUntil("a left-over postmaster to exit", async () => postmasterOf(dir) === undefined, {
      timeoutMs: 15_000,
      intervalMs: 50,
    }).catch(() => {});
    await rm(dirname(dir), { recursive: true, force: true });
  }
});

function signal(pid: number, name: NodeJS.Signals): void {
  try {
    process.kill(pid, name);
  } catch {
    // already gone
  }
}

/** The pid in `dir`'s postmaster.pid when that process still runs (not a zombie), else undefined. */
function postmasterOf(dir: string): number | undefined {
  try {
    const pid = Number(readFileSync(join(dir, "postmaster.pid"), "utf8").split("\n")[0]);
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    return stat.slice(stat.lastIndexOf(")") + 2)[0] === "Z" ? undefined : pid;
  } catch {
    return undefined;
  }
}

async function startServe(dir: string, pgPort: number) {
  const env = {
    PATH: process.env.PATH,
    HOME: process.env.HOME,
    NO_COLOR: "1",
    HOST: "127.0.0.1",
    PORT: String(await freePort()),
    EMBEDDED_PG_DIR: dir,
    EMBEDDED_PG_PORT: String(pgPort),
    STRIPE_WEBHOOK_SECRET: SECRET,
  };
  const serve = spawnBun(["src/bin/serve.ts"], env, tracked);
  await waitForLine(serve, "webhook-inbox listening on", 60_000);
  return { serve, env };
}

test("`openDatabase()` takes over an embedded PostgreSQL orphaned by a SIGKILLed serve: the next serve stops it on SIGTERM", async () => {
  const dir = await temporaryDataDir("webhook-inbox-orphan-pg-");
  dirs.add(dir);
  const pgPort = await freePort();
  const first = await startServe(dir, pgPort);
  const postmaster = postmasterOf(dir);
  expect(postmaster).toBeNumber();
  first.serve.child.kill("SIGKILL");
  await first.serve.child.exited;
  expect(postmasterOf(dir)).toBe(postmaster); // orphaned, still running

  const second = await startServe(dir, pgPort);
  expect(postmasterOf(dir)).toBe(postmaster); // reused, not restarted
  second.serve.child.kill("SIGTERM");
  expect(await second.serve.child.exited).toBe(0);
  await waitUntil("the orphaned postmaster to exit", async () => postmasterOf(dir) === undefined, { timeoutMs: 30_000, intervalMs: 50 });
  expect(await second.serve.stderr).toContain("left running by a command that is gone: this command stops it on exit");
}, 180_000);

test("`openDatabase()` leaves an embedded PostgreSQL to the live serve that started it: migrate says so and does not stop it", async () => {
  const dir = await temporaryDataDir("webhook-inbox-orphan-pg-");
  dirs.add(dir);
  const pgPort = await freePort();
  const { serve, env } = await startServe(dir, pgPort);
  const postmaster = postmasterOf(dir);
  const migrate = spawnBun(["src/bin/migrate.ts"], env, tracked);
  expect(await migrate.child.exited).toBe(0);
  expect(await migrate.stderr).toContain(`started by process ${serve.child.pid}: it stops when that command exits`);
  expect(postmasterOf(dir)).toBe(postmaster);
  serve.child.kill("SIGTERM");
  expect(await serve.child.exited).toBe(0);
  await waitUntil("serve's postmaster to exit", async () => postmasterOf(dir) === undefined, { timeoutMs: 30_000, intervalMs: 50 });
}, 180_000);
