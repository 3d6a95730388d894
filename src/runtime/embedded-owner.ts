// Edge file: which command stops the embedded PostgreSQL, recorded as a pid file in its data directory.
// Runtime-specific (file system, signals to processes); the core never imports it.
import { mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";

/** Next to postmaster.pid: the pid of the command that stops the server when it exits. */
const OWNER_FILE = "webhook-inbox-owner.pid";

/** The pid in `file`'s first line, or undefined when there is no such file or no number. */
function pidIn(file: string): number | undefined {
  try {
    const pid = Number(readFileSync(file, "utf8").split("\n")[0]);
    return Number.isSafeInteger(pid) && pid > 0 ? pid : undefined;
  } catch {
    return undefined;
  }
}

/** True while process `pid` exists (signal 0 checks without signalling; EPERM means it exists). */
function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as { code?: unknown }).code === "EPERM";
  }
}

/** Like alive, but a zombie (exited, not yet reaped by a parent that is not ours) counts as gone. */
function running(pid: number): boolean {
  if (!alive(pid)) return false;
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    return stat.slice(stat.lastIndexOf(")") + 2)[0] !== "Z";
  } catch {
    return true; // no /proc (macOS), or it exited just now: the next check tells
  }
}

/**
 * The pid of another live command recorded as the owner of the server on data directory `dir`, or
 * undefined when none is (no record, or its process is gone: killed with SIGKILL, say). A pid reused
 * by an unrelated process since reads as a live owner: the server is then left running, never stopped
 * under someone else.
 */
export function liveOwner(dir: string): number | undefined {
  const pid = pidIn(join(dir, OWNER_FILE));
  return pid !== undefined && pid !== process.pid && alive(pid) ? pid : undefined;
}

/** Records this process as the owner of the server on `dir`. @throws the file system's error. */
export function recordOwner(dir: string): void {
  writeFileSync(join(dir, OWNER_FILE), `${process.pid}\n`);
}

/** Removes the owner record of `dir` when it still names this process. */
export function forgetOwner(dir: string): void {
  if (pidIn(join(dir, OWNER_FILE)) === process.pid) rmSync(join(dir, OWNER_FILE), { force: true });
}

/**
 * Stops the server on `dir` that this process did not spawn: SIGINT (fast shutdown) to the pid in
 * its postmaster.pid, then waits until that process is gone, at most `timeoutMs` ms. PostgreSQL
 * manual, "Shutting Down the Server".
 * @throws Error when the server is still running after `timeoutMs`.
 */
export async function stopPostmaster(dir: string, timeoutMs = 30_000): Promise<void> {
  const pid = pidIn(join(dir, "postmaster.pid"));
  if (pid === undefined || !alive(pid)) return;
  process.kill(pid, "SIGINT");
  const deadline = Date.now() + timeoutMs;
  while (running(pid)) {
    if (Date.now() > deadline) throw new Error(`Cannot stop embedded PostgreSQL: process ${pid} still runs ${timeoutMs} ms after SIGINT`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

/** How long {@link withStartLock} waits for another command's start (initdb included) before it gives up, ms. */
export const START_LOCK_WAIT_MS = 120_000;

/**
 * Runs `fn` (reuse or start the embedded server on data directory `dir`) while holding `dir`'s start
 * lock: a file `<dir>.starting` next to it, created exclusively (`O_EXCL`) and holding this process's
 * pid, removed when `fn` settles. A second command started at the same moment (`serve` and `worker`
 * together on a new directory) waits for the first to finish initdb and start, then finds the server
 * running and reuses it, instead of both probing the port, each seeing the other's probe, and both
 * failing. A lock whose process is gone (killed during a start) is taken over.
 * @throws Error naming the lock file when another live process has held it for
 *   {@link START_LOCK_WAIT_MS}; `signal.reason` when stopped while waiting; what `fn` throws.
 */
export async function withStartLock<T>(dir: string, fn: () => Promise<T>, signal?: AbortSignal, waitMs = START_LOCK_WAIT_MS): Promise<T> {
  const lock = `${resolve(dir)}.starting`;
  mkdirSync(dirname(lock), { recursive: true });
  const deadline = Date.now() + waitMs;
  for (;;) {
    signal?.throwIfAborted();
    try {
      writeFileSync(lock, `${process.pid}\n`, { flag: "wx" });
      break;
    } catch (err) {
      if ((err as { code?: unknown }).code !== "EEXIST") throw err;
    }
    const holder = pidIn(lock);
    // No pid yet: its creator is between open and write; wait like for a live holder.
    if (holder !== undefined && !running(holder)) {
      rmSync(lock, { force: true });
      continue;
    }
    if (Date.now() >= deadline) {
      throw new Error(
        `Cannot start embedded PostgreSQL: process ${holder ?? "?"} has been starting it in ${dir} for ${Math.round(waitMs / 1000)} s (remove ${lock} if no such command runs)`,
      );
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  try {
    return await fn();
  } finally {
    rmSync(lock, { force: true });
  }
}
