// A Bun child process whose stdout is collected line by line, for tests that start real commands.
import type { Subprocess } from "bun";
import { join } from "node:path";

const ROOT = join(import.meta.dir, "..", "..");

/** A spawned child, its stdout lines as they arrive, and its whole stderr once it exits. */
export interface Running {
  child: Subprocess<"ignore", "pipe", "pipe">;
  lines: string[];
  stdoutDone: Promise<void>;
  stderr: Promise<string>;
}

/**
 * Starts `bun <args…>` in the repository root with exactly `env`, adds it to `tracked` until it exits
 * (so afterAll can SIGKILL what is left, by pid), and collects its stdout line by line.
 */
export function spawnBun(args: string[], env: Record<string, string | undefined>, tracked: Set<Subprocess>): Running {
  const child = Bun.spawn([process.execPath, ...args], { cwd: ROOT, env, stdin: "ignore", stdout: "pipe", stderr: "pipe" });
  tracked.add(child);
  void child.exited.then(() => tracked.delete(child));
  const lines: string[] = [];
  const stdoutDone = (async () => {
    const decoder = new TextDecoder();
    let partial = "";
    for await (const chunk of child.stdout) {
      const parts = (partial + decoder.decode(chunk, { stream: true })).split("\n");
      partial = parts.pop() ?? "";
      lines.push(...parts);
    }
    if (partial !== "") lines.push(partial);
  })();
  return { child, lines, stdoutDone, stderr: new Response(child.stderr).text() };
}

/** Waits for a stdout line starting with `prefix`; fails at once if the child exits first, or after `timeoutMs`. */
export async function waitForLine(w: Running, prefix: string, timeoutMs = 15_000): Promise<string> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const line = w.lines.find((l) => l.startsWith(prefix));
    if (line !== undefined) return line;
    const exited = w.child.exitCode !== null || w.child.signalCode !== null;
    if (exited || Date.now() > deadline) {
      const why = exited ? `child ${w.child.pid} exited (${w.child.exitCode ?? w.child.signalCode})` : `${timeoutMs} ms passed`;
      throw new Error(
        `Cannot find "${prefix}" on stdout: ${why}; stdout ${JSON.stringify(w.lines)}, stderr ${exited ? await w.stderr : "(running)"}`,
      );
    }
    await Bun.sleep(10);
  }
}
