// Stop signals of the entry files (src/runtime/signals.ts): the duplicate SIGINT that `bun run`
// delivers on Ctrl-C must not turn a graceful stop into an abrupt exit; a later signal still does.
// The last test starts the real `bun run worker` in its own process group and signals the group,
// as a terminal's Ctrl-C does. Only processes this file spawned are signalled, by their pid.
import { afterAll, expect, test } from "bun:test";
import { spawn, type ChildProcess } from "node:child_process";
import { EventEmitter } from "node:events";
import { join } from "node:path";
import { onStopSignals, REPEAT_WINDOW_MS } from "../src/runtime/signals.ts";
import { freshDatabase } from "./helpers.ts";

function harness() {
  const source = new EventEmitter();
  let clock = 1_000;
  const calls: string[] = [];
  onStopSignals((signal) => calls.push(`stop ${signal}`), () => calls.push("exit now"), { source, now: () => clock });
  return { calls, send: (signal: "SIGTERM" | "SIGINT", afterMs = 0) => ((clock += afterMs), source.emit(signal)) };
}

test("`onStopSignals()` stops once on the first signal and ignores a repeat within the window (Ctrl-C under `bun run`)", () => {
  const h = harness();
  h.send("SIGINT");
  h.send("SIGINT", 2);
  h.send("SIGINT", REPEAT_WINDOW_MS - 2);
  expect(h.calls).toEqual(["stop SIGINT"]);
});

test("`onStopSignals()` exits at once on a signal later than the window, SIGTERM or SIGINT alike", () => {
  const h = harness();
  h.send("SIGTERM");
  h.send("SIGINT", REPEAT_WINDOW_MS + 1);
  expect(h.calls).toEqual(["stop SIGTERM", "exit now"]);
});

const fresh = await freshDatabase();
const spawned = new Set<ChildProcess>();
afterAll(async () => {
  for (const child of spawned) if (child.pid !== undefined && child.exitCode === null) process.kill(-child.pid, "SIGKILL");
  await fresh.drop();
});

test("Ctrl-C to the process group of `bun run worker` stops it gracefully: one stopping line, exit 0", async () => {
  // detached: the child leads a new process group, like a shell's foreground job.
  const child = spawn(process.execPath, ["run", "worker", "--poll-ms", "200"], {
    cwd: join(import.meta.dir, ".."), detached: true, stdio: ["ignore", "pipe", "pipe"],
    env: { PATH: process.env.PATH ?? "/usr/bin:/bin", HOME: process.env.HOME ?? "/root", DATABASE_URL: fresh.url, NO_COLOR: "1" },
  });
  spawned.add(child);
  let stdout = "";
  let stderr = "";
  child.stdout?.on("data", (chunk: Buffer) => (stdout += chunk.toString("utf8")));
  child.stderr?.on("data", (chunk: Buffer) => (stderr += chunk.toString("utf8")));
  const exited = new Promise<number | null>((resolve) => child.once("exit", (code) => resolve(code)));
  const deadline = Date.now() + 20_000;
  while (!stdout.includes('"worker":"started"')) {
    if (child.exitCode !== null || Date.now() > deadline) throw new Error(`worker did not start: ${stdout} ${stderr}`);
    await Bun.sleep(20);
  }
  // The whole group (`bun run` and the worker), as a terminal's Ctrl-C does; `bun run` forwards its own
  // copy. Two pending SIGINTs can merge into one in the kernel, so the repeat is also sent explicitly.
  process.kill(-(child.pid ?? 0), "SIGINT");
  await Bun.sleep(5);
  try {
    process.kill(-(child.pid ?? 0), "SIGINT");
  } catch {
    // the group is already gone: the worker stopped within 5 ms
  }
  const killer = setTimeout(() => child.pid !== undefined && process.kill(-child.pid, "SIGKILL"), 15_000);
  const code = await exited;
  clearTimeout(killer);
  const lines = stdout.split("\n").filter((l) => l.startsWith("{")).map((l) => JSON.parse(l) as Record<string, unknown>);
  expect(lines.filter((l) => l.worker === "stopping")).toEqual([{ worker: "stopping", signal: "SIGINT" }]);
  expect(lines.at(-1)).toEqual({ worker: "stopped" });
  expect(code).toBe(0);
}, 40_000);
