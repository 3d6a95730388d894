// Spawning and killing the crash children of test/system/children/: only processes this file spawned, by pid.
import { join } from "node:path";
import type { Subprocess } from "bun";

/** A spawned child and everything it has written so far. */
export interface Child {
  process: Subprocess<"pipe", "pipe", "pipe">;
  stdout: string;
  stderr: string;
  /** Resolves when the child has exited and both streams are read to the end. */
  done: Promise<void>;
}

const running = new Set<Child>();

/** Starts `bun test/system/children/<script>.ts <url>` with `body` on stdin, collecting stdout and stderr. */
export function spawnChild(script: string, url: string, body: string): Child {
  const proc = Bun.spawn([process.execPath, join(import.meta.dir, "..", "system", "children", `${script}.ts`), url], {
    stdin: "pipe",
    stdout: "pipe",
    stderr: "pipe",
  });
  const child: Child = { process: proc, stdout: "", stderr: "", done: Promise.resolve() };
  child.done = Promise.all([
    collect(proc.stdout, (text) => (child.stdout += text)),
    collect(proc.stderr, (text) => (child.stderr += text)),
    proc.exited,
  ]).then(() => {
    running.delete(child);
  });
  running.add(child);
  proc.stdin.write(body);
  void proc.stdin.end();
  return child;
}

async function collect(stream: ReadableStream<Uint8Array>, append: (text: string) => void): Promise<void> {
  const decoder = new TextDecoder();
  for await (const chunk of stream) append(decoder.decode(chunk, { stream: true }));
}

/**
 * Waits for a complete stdout line starting with `prefix` and returns it. Fails, with the child's
 * output, if the child exits first or after `timeoutMs` (a bound, not a speed assertion).
 */
export async function waitForLine(child: Child, prefix: string, timeoutMs = 15_000): Promise<string> {
  const deadline = Date.now() + timeoutMs;
  let exited = false;
  void child.done.then(() => (exited = true));
  while (true) {
    const line = child.stdout
      .split("\n")
      .slice(0, -1)
      .find((l) => l.startsWith(prefix));
    if (line !== undefined) return line;
    if (exited || Date.now() > deadline) {
      const why = exited ? `the child exited (${child.process.exitCode ?? child.process.signalCode})` : `${timeoutMs} ms passed`;
      throw new Error(
        `Cannot find "${prefix}" on the child's stdout: ${why}; stdout ${JSON.stringify(child.stdout)}, stderr ${JSON.stringify(child.stderr)}`,
      );
    }
    await Bun.sleep(10);
  }
}

/** SIGKILLs the child by its pid, waits until it has exited, and returns the signal that ended it. */
export async function killChild(child: Child): Promise<Child["process"]["signalCode"]> {
  const proc = child.process;
  if (proc.exitCode === null && proc.signalCode === null) process.kill(proc.pid, "SIGKILL");
  await proc.exited;
  await child.done;
  return proc.signalCode;
}

/** Kills every child still running (for afterAll: none may outlive the test file). */
export async function killAllChildren(): Promise<void> {
  await Promise.all([...running].map(killChild));
}
