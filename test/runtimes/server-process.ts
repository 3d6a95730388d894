// Test helper: one runtime's receiver as a child process on a free loopback port. Each child runs under
// coreutils `timeout`, which bounds its life and then signals the child's whole process group (workerd
// is Miniflare's child), so nothing outlives the test even if it is never stopped.
import { spawn, type ChildProcess } from "node:child_process";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { freePort } from "../../src/runtime/embedded-postgres.ts";
import { waitUntil } from "../support/wait-until.ts";

export const ROOT = join(import.meta.dir, "..", "..");

/** A started receiver: its base URL, its output so far, and a graceful stop that resolves with the exit code. */
export interface ServerProcess {
  base: string;
  output(): string;
  /** SIGTERM, then the exit code (null when killed by a signal); SIGKILL after `graceMs`. */
  stop(graceMs?: number): Promise<number | null>;
  /** SIGKILL to the server itself (a crash: no shutdown runs), then waits until `timeout` has exited too. */
  kill(): Promise<void>;
}

/** Options for {@link startServer}. */
export interface ServerOptions {
  /** The command, e.g. `["node", "dist/node/serve.mjs"]`, run in the repository root. */
  command: string[];
  /** Added to PATH and HOME; PORT and HOST are set here. */
  env: Record<string, string>;
  /** Seconds before `timeout` ends the child on its own. Default 120. */
  lifetimeSec?: number;
  /** How long to wait for `GET /healthz` to answer 200, ms. Default 30 000. */
  readyMs?: number;
  /** The loopback port to listen on (a restart on the port of a killed server). Default a free port. */
  port?: number;
}

/**
 * Starts `command` with PORT on a free loopback port and waits until `/readyz` answers 200 (`/healthz`
 * answers as soon as it listens, before the database is waited for and migrated).
 */
export async function startServer(options: ServerOptions): Promise<ServerProcess> {
  const port = options.port ?? (await freePort());
  const env = {
    PATH: process.env.PATH ?? "/usr/bin:/bin",
    HOME: process.env.HOME ?? "/root",
    NO_COLOR: "1",
    ...options.env,
    PORT: String(port),
    HOST: "127.0.0.1",
  };
  const child: ChildProcess = spawn("timeout", ["--kill-after=5", String(options.lifetimeSec ?? 120), ...options.command], {
    cwd: ROOT,
    env,
    stdio: ["ignore", "pipe", "pipe"],
  });
  let output = "";
  child.stdout?.on("data", (chunk: Buffer) => (output += chunk.toString("utf8")));
  child.stderr?.on("data", (chunk: Buffer) => (output += chunk.toString("utf8")));
  const exited = new Promise<number | null>((resolve) => child.once("exit", (code) => resolve(code)));
  const running = () => child.exitCode === null && child.signalCode === null;
  const base = `http://127.0.0.1:${port}`;
  const stop = async (graceMs = 10_000): Promise<number | null> => {
    // SIGTERM to the server itself, once: `timeout` would pass its own SIGTERM to the server *and* its
    // group, so the server would see two (the Bun, Node and workerd entry files ignore the repeat; Deno's
    // exits at once). `timeout` then exits with its code.
    const server = child.pid === undefined ? undefined : serverPid(child.pid);
    if (running() && server !== undefined) process.kill(server, "SIGTERM");
    // `timeout` leads its own process group (its pid): SIGKILL the group, grandchildren included.
    const killer = setTimeout(() => running() && child.pid !== undefined && process.kill(-child.pid, "SIGKILL"), graceMs);
    const code = await exited;
    clearTimeout(killer);
    return code;
  };
  const kill = async (): Promise<void> => {
    const server = child.pid === undefined ? undefined : serverPid(child.pid);
    if (running()) {
      if (server !== undefined) process.kill(server, "SIGKILL");
      else if (child.pid !== undefined) process.kill(-child.pid, "SIGKILL"); // not forked yet: the whole group
    }
    await exited;
  };
  try {
    await waitUntil(
      `${options.command.join(" ")} to answer GET /readyz`,
      async () => {
        if (!running()) throw new Error(`exited with ${child.exitCode ?? child.signalCode}`);
        return fetch(`${base}/readyz`).then(
          (r) => r.ok,
          () => false,
        );
      },
      { timeoutMs: options.readyMs ?? 30_000, intervalMs: 100 },
    );
  } catch (err) {
    await stop(2_000);
    throw new Error(
      `Cannot start ${options.command.join(" ")}: ${err instanceof Error ? err.message : String(err)}\n${output.slice(-3000)}`,
    );
  }
  return { base, output: () => output, stop, kill };
}

/** The child of `timeout` (pid `parent`): the server process (Linux /proc). */
export function serverPid(parent: number): number | undefined {
  try {
    const pid = Number(readFileSync(`/proc/${parent}/task/${parent}/children`, "utf8").trim().split(/\s+/)[0]);
    return Number.isSafeInteger(pid) && pid > 0 ? pid : undefined;
  } catch {
    return undefined;
  }
}
