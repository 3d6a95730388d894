// A stop at any moment of `bun run serve`'s start-up on the embedded database ends serve cleanly and
// leaves the development database either not started or running and answering (src/runtime/dev-database.ts:
// it outlives the commands by design, in its own session, so a terminal's SIGTERM/Ctrl-C reaches only
// serve). Real signals to a real process group, at several delays; only processes this file spawned are
// signalled (by pid or group), and the server a round left is found by its data directory and stopped by its pid.
import { afterAll, expect, test } from "bun:test";
import { spawn } from "node:child_process";
import { readdirSync, readFileSync } from "node:fs";
import { rm } from "node:fs/promises";
import { dirname, join } from "node:path";
import postgres from "postgres";
import { freePort, initialiseCluster, temporaryDataDir } from "../../src/runtime/embedded-postgres.ts";
import { devDatabaseUrl, stopDevDatabase } from "../../src/runtime/dev-database.ts";
import { SECRET } from "../support/helpers.ts";
import { waitUntil } from "../support/wait-until.ts";
import { REPEAT_WINDOW_MS } from "../../src/runtime/signals.ts";

const ROOT = join(import.meta.dir, "..", "..");
const dirs = new Set<string>();
const groups = new Set<number>();
afterAll(async () => {
  for (const group of groups) signalGroup(group, "SIGKILL");
  for (const dir of dirs) {
    for (const pid of postgresOf(dir)) signalPid(pid, "SIGQUIT");
    await rm(dirname(dir), { recursive: true, force: true });
  }
});

function signalPid(pid: number, signal: NodeJS.Signals): void {
  try {
    process.kill(pid, signal);
  } catch {
    // already gone
  }
}

function signalGroup(group: number, signal: NodeJS.Signals): void {
  signalPid(-group, signal);
}

/** Fields of /proc/<pid>/stat after the name (which may hold spaces): [state, ppid, pgrp, …]. */
function statFields(pid: string): string[] {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    return stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  } catch {
    return [];
  }
}

const pids = () => readdirSync("/proc").filter((d) => /^\d+$/.test(d));

/** Live (not zombie) processes of process group `group`. */
function membersOf(group: number): number[] {
  return pids()
    .filter((p) => {
      const f = statFields(p);
      return f[2] === String(group) && f[0] !== "Z";
    })
    .map(Number);
}

/** PostgreSQL processes serving `dataDir`: by `-D <dataDir>` on their command line, or the pid in postmaster.pid. */
function postgresOf(dataDir: string): number[] {
  const found = new Set<number>();
  for (const p of pids()) {
    try {
      const args = readFileSync(`/proc/${p}/cmdline`, "utf8").split("\0");
      const at = args.indexOf("-D");
      if (at >= 0 && args[at + 1] === dataDir && statFields(p)[0] !== "Z") found.add(Number(p));
    } catch {
      // gone meanwhile
    }
  }
  try {
    const pid = Number(readFileSync(join(dataDir, "postmaster.pid"), "utf8").split("\n")[0]);
    if (pid > 0 && statFields(String(pid)).length > 0 && statFields(String(pid))[0] !== "Z") found.add(pid);
  } catch {
    // no postmaster.pid: no server
  }
  return [...found];
}

/** True when the server on 127.0.0.1:`port` answers `select 1` within `timeoutMs` (it may still be starting). */
async function answers(port: number, timeoutMs = 20_000): Promise<boolean> {
  const sql = postgres(devDatabaseUrl(port), { max: 1, connect_timeout: 2, onnotice: () => {} });
  try {
    await waitUntil(`the server on port ${port} to answer`, async () => (await sql`select 1 as one`.catch(() => []))[0]?.one === 1, {
      timeoutMs,
      intervalMs: 100,
    });
    return true;
  } catch {
    return false;
  } finally {
    await sql.end({ timeout: 1 });
  }
}

/**
 * Starts `bun run serve` on `dataDir` leading a new process group (a shell's foreground job), sends
 * SIGTERM to the group after `delayMs` (and again `repeatAfterMs` later, when given, as an impatient
 * operator or supervisor would), waits until every process of the group has exited, and returns the exit
 * code or signal of `bun run`, what serve printed, and whether a PostgreSQL of `dataDir` runs and
 * whether it answers (then it is stopped, by its pid, so the next round starts it again).
 */
async function stopServeAfter(
  dataDir: string,
  pgPort: number,
  delayMs: number,
  repeatAfterMs?: number,
): Promise<{ delayMs: number; code: number | string | null; running: boolean; answered: boolean; output: string }> {
  const child = spawn(process.execPath, ["run", "serve"], {
    cwd: ROOT,
    detached: true,
    stdio: ["ignore", "pipe", "pipe"],
    env: {
      PATH: process.env.PATH ?? "/usr/bin:/bin",
      HOME: process.env.HOME ?? "/root",
      NO_COLOR: "1",
      HOST: "127.0.0.1",
      PORT: String(await freePort()),
      EMBEDDED_PG_DIR: dataDir,
      EMBEDDED_PG_PORT: String(pgPort),
      STRIPE_WEBHOOK_SECRET: SECRET,
    },
  });
  const group = child.pid ?? 0;
  groups.add(group);
  // What serve printed, so a failed round says why (a stop is graceful only when nothing went wrong).
  let output = "";
  child.stdout?.on("data", (chunk: Buffer) => (output += chunk.toString()));
  child.stderr?.on("data", (chunk: Buffer) => (output += chunk.toString()));
  const exited = new Promise<number | string | null>((resolve) => child.once("exit", (code, signal) => resolve(code ?? signal)));
  const drained = new Promise((resolve) => child.once("close", resolve));
  await Bun.sleep(delayMs);
  signalGroup(group, "SIGTERM");
  if (repeatAfterMs !== undefined) {
    await Promise.race([exited, Bun.sleep(repeatAfterMs)]);
    signalGroup(group, "SIGTERM");
  }
  const code = await exited;
  // `bun run` may exit before the serve process it started has finished stopping: wait for the whole group.
  await waitUntil(`process group ${group} to exit`, async () => membersOf(group).length === 0, { timeoutMs: 30_000, intervalMs: 50 });
  groups.delete(group);
  // The pipes close once every writer has exited; bounded, in case a process left behind still holds them.
  await Promise.race([drained, Bun.sleep(5_000)]);
  const running = postgresOf(dataDir).length > 0;
  const answered = running && (await answers(pgPort));
  await stopDevDatabase(dataDir);
  return { delayMs, code, running, answered, output };
}

const DELAYS_MS = Array.from({ length: 16 }, (_, i) => i * 100); // 0, 100, …, 1500 ms

test("SIGTERM to `bun run serve`'s process group at any moment of start-up on an existing embedded cluster ends serve cleanly, and a database it started answers", async () => {
  const dataDir = await temporaryDataDir("webhook-inbox-startstop-pg-");
  dirs.add(dataDir);
  const pgPort = await freePort();
  // Initialised once beforehand, so each round exercises the start of an existing cluster, not initdb.
  await initialiseCluster(dataDir);
  const rounds = [];
  for (const delayMs of DELAYS_MS) rounds.push(await stopServeAfter(dataDir, pgPort, delayMs));
  expect(rounds.filter((r) => r.running && !r.answered)).toEqual([]);
  // Each stop was graceful (0) or landed before serve installed its handlers (SIGTERM): never a failure.
  expect(rounds.filter((r) => r.code !== 0 && r.code !== "SIGTERM")).toEqual([]);
  // The later rounds stopped a serve that had started the database: it was left running, by design.
  expect(rounds.filter((r) => r.running).length).toBeGreaterThan(0);
}, 180_000);

test("SIGTERM to `bun run serve`'s process group while it initialises a new embedded cluster ends serve cleanly, and the next start works", async () => {
  const dataDir = await temporaryDataDir("webhook-inbox-startstop-pg-");
  dirs.add(dataDir);
  const pgPort = await freePort();
  const rounds = [];
  // Each SIGTERM is repeated after the Ctrl-C repeat window: a stop in progress ignores a repeated SIGTERM.
  for (const delayMs of [400, 900, 1500, 2500]) rounds.push(await stopServeAfter(dataDir, pgPort, delayMs, REPEAT_WINDOW_MS + 50));
  expect(rounds.filter((r) => r.running && !r.answered)).toEqual([]);
  expect(rounds.filter((r) => r.code !== 0 && r.code !== "SIGTERM")).toEqual([]);
  // Whatever a stop interrupted (initdb included), serve starts afterwards on the same directory.
  const last = await stopServeAfter(dataDir, pgPort, 15_000);
  expect(last.output).toContain("webhook-inbox listening on");
  expect(last.code).toBe(0);
  expect(last.answered).toBe(true);
}, 180_000);
