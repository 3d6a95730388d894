// Edge file: child processes and database restarts for `bun run chaos` (node:child_process, signals).
import { spawn, type ChildProcess } from "node:child_process";
import { readFileSync } from "node:fs";
import { join } from "node:path";

/** A child process that can be SIGKILLed and started again with the same command and environment. */
export interface Supervised {
  readonly name: string;
  readonly running: boolean;
  /** Pid of the current run (of the last one once stopped); undefined before the first start. */
  readonly pid: number | undefined;
  /** Times it exited without being stopped (and was started again). */
  readonly selfExits: number;
  /** Starts it (again) and keeps it running until {@link stop}. No-op while running. */
  start(): void;
  /**
   * Sends `signal` to this child only (by its pid) and resolves with its exit code (null when killed by
   * a signal). It stays stopped until the next {@link start}.
   */
  stop(signal: NodeJS.Signals): Promise<number | null>;
  /** Resolves once the current run printed a line matching its ready pattern (or exited); false after `ms`. */
  ready(ms: number): Promise<boolean>;
}

/**
 * Supervises `bun <args…>` with `env` added to this process's environment. Output goes to `log`
 * (one call per line, prefixed with the name), so a run can be inspected afterwards; a line matching
 * `readyPattern` marks the current run ready (its signal handlers are installed by then). A child that
 * exits while it should run (a crash, a start-up failure) is counted in `selfExits`, logged, and
 * started again 250 ms later, as a process manager would: otherwise one early exit leaves the run a
 * receiver or worker short until the end.
 */
export function supervise(
  name: string,
  args: string[],
  env: Record<string, string>,
  log: (line: string) => void,
  readyPattern: RegExp,
): Supervised {
  let child: ChildProcess | undefined;
  let exited: Promise<number | null> = Promise.resolve(null);
  let isReady = false;
  let wanted = false;
  let selfExits = 0;
  return {
    name,
    get running() {
      return child !== undefined && child.exitCode === null && child.signalCode === null;
    },
    get selfExits() {
      return selfExits;
    },
    get pid() {
      return child?.pid;
    },
    start() {
      wanted = true;
      if (this.running) return;
      const c = spawn(process.execPath, args, { env: { ...process.env, ...env }, stdio: ["ignore", "pipe", "pipe"] });
      child = c;
      isReady = false;
      exited = new Promise((resolve) => c.once("exit", (code) => resolve(code)));
      c.once("exit", (code, signal) => {
        if (!wanted || child !== c) return;
        selfExits++;
        log(`${name} exited on its own (${code ?? signal}); starting it again`);
        setTimeout(() => {
          if (wanted && !this.running) this.start();
        }, 250);
      });
      for (const stream of [c.stdout, c.stderr]) {
        let buffer = "";
        stream?.on("data", (chunk: Buffer) => {
          buffer += chunk.toString("utf8");
          const lines = buffer.split("\n");
          buffer = lines.pop() ?? "";
          for (const line of lines) {
            if (!line) continue;
            if (readyPattern.test(line)) isReady = true;
            log(`${name} ${line}`);
          }
        });
      }
    },
    async ready(ms) {
      const deadline = Date.now() + ms;
      while (Date.now() < deadline) {
        if (isReady || !this.running) return isReady;
        await new Promise((r) => setTimeout(r, 50));
      }
      return false;
    },
    async stop(signal) {
      wanted = false;
      if (!child || !this.running) return child?.exitCode ?? null;
      const pid = child.pid;
      if (pid !== undefined) process.kill(pid, signal);
      return exited;
    },
  };
}

/**
 * Immediate shutdown of the PostgreSQL cluster in `dataDir` (SIGQUIT to its postmaster, the pid on the
 * first line of `postmaster.pid`; PostgreSQL manual, "Shutting Down the Server"): no checkpoint,
 * crash recovery on the next start. Resolves once the postmaster is gone.
 */
export async function killPostmaster(dataDir: string): Promise<void> {
  const pid = Number(readFileSync(join(dataDir, "postmaster.pid"), "utf8").split("\n")[0]);
  if (!Number.isSafeInteger(pid) || pid <= 0) throw new Error(`Cannot read the postmaster pid in ${dataDir}`);
  process.kill(pid, "SIGQUIT");
  for (let i = 0; i < 200; i++) {
    try {
      process.kill(pid, 0);
    } catch {
      return;
    }
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`PostgreSQL (pid ${pid}) did not stop within 10 s of SIGQUIT`);
}
