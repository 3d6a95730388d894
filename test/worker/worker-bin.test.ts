// `bun run worker` settings as a real process: every problem listed at once, naming flag and variable.
import { expect, test } from "bun:test";
import { join } from "node:path";

const ROOT = join(import.meta.dir, "..", "..");

test("`bun run worker` lists every settings problem at once (attempts, lease vs timeout, concurrency), naming each variable, and exits 2", async () => {
  const child = Bun.spawn([process.execPath, join(ROOT, "src", "bin", "worker.ts"), "--max-attempts", "0"], {
    cwd: ROOT,
    // No DATABASE_URL needed: settings are checked before any database is opened.
    env: { PATH: process.env.PATH ?? "", WORKER_LEASE_MS: "1000", WORKER_TIMEOUT_MS: "5000", WORKER_CONCURRENCY: "two" },
    stdin: "ignore",
    stdout: "pipe",
    stderr: "pipe",
    timeout: 20_000,
  });
  const [stderr, code] = await Promise.all([new Response(child.stderr).text(), child.exited]);
  expect(code).toBe(2);
  expect(stderr).toContain('--max-attempts (WORKER_MAX_ATTEMPTS) must be a whole number ≥ 1, got "0"');
  expect(stderr).toContain("--timeout-ms (5000) must be shorter than --lease-ms (1000)");
  expect(stderr).toContain('--concurrency (WORKER_CONCURRENCY) must be a whole number ≥ 1, got "two"');
}, 30_000);
