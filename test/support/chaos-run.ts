// Test helper: `bun run chaos` as a child process, read by the JSON summary it prints last (`--json`).
import { join } from "node:path";

const ROOT = join(import.meta.dir, "..", "..");

/**
 * Runs `bun src/dev/bin/chaos.ts …args` from the repository root with `env` (DATABASE_URL as given: delete
 * it for chaos's own server), SIGKILLs it after `killAfterMs` ms (a bound on a hung run, not a speed
 * assertion) and resolves with its exit code and the JSON object on the last line of its stdout.
 * @throws Error with the tails of stdout and stderr when that last line is not JSON (chaos printed no summary).
 */
export async function runChaos<T = Record<string, unknown>>(
  args: string[],
  env: Record<string, string | undefined>,
  killAfterMs: number,
): Promise<{ code: number; summary: T }> {
  const child = Bun.spawn(["bun", "src/dev/bin/chaos.ts", ...args], { cwd: ROOT, env, stdout: "pipe", stderr: "pipe" });
  const killer = setTimeout(() => child.kill("SIGKILL"), killAfterMs);
  const [stdout, stderr, code] = await Promise.all([new Response(child.stdout).text(), new Response(child.stderr).text(), child.exited]);
  clearTimeout(killer);
  try {
    return { code, summary: JSON.parse(stdout.trim().split("\n").pop() ?? "") as T };
  } catch {
    throw new Error(`chaos printed no summary (exit ${code}):\n${stdout.slice(-2000)}\n${stderr.slice(-2000)}`);
  }
}

/** An environment for a chaos run on a server of its own: this process's, without DATABASE_URL. */
export function ownServerEnv(): Record<string, string | undefined> {
  const env: Record<string, string | undefined> = { ...process.env };
  delete env.DATABASE_URL;
  return env;
}
