// `bun run worker` settings as a real process: every problem listed at once, naming flag and variable.
import { afterAll, expect, test } from "bun:test";
import type { Subprocess } from "bun";
import { join } from "node:path";
import { freePort } from "../../src/runtime/embedded-postgres.ts";
import { spawnBun, waitForLine } from "../support/bun-child.ts";
import { freshDatabase } from "../support/helpers.ts";

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

const tracked = new Set<Subprocess>();
afterAll(() => {
  for (const child of tracked) child.kill("SIGKILL");
});

test("`bun run worker` with nothing listening at STRIPE_API_BASE says at start it cannot connect to that host:port (never the key), and starts", async () => {
  const database = await freshDatabase();
  try {
    const port = await freePort(); // free a moment ago: nothing listens there
    const key = "sk_test_workerworker123";
    const worker = spawnBun(
      ["src/bin/worker.ts", "--poll-ms", "100"],
      {
        PATH: process.env.PATH,
        DATABASE_URL: database.url,
        STRIPE_ENDPOINTS: "events",
        STRIPE_ENDPOINT_KIND_EVENTS: "thin",
        STRIPE_API_KEY: key,
        STRIPE_API_BASE: `http://127.0.0.1:${port}`,
      },
      tracked,
    );
    await waitForLine(worker, '{"worker":"started"', 30_000);
    worker.child.kill("SIGTERM");
    expect(await worker.child.exited).toBe(0);
    const stderr = await worker.stderr;
    expect(stderr).toContain(
      `webhook-inbox worker: Cannot connect to the Stripe API at 127.0.0.1:${port} (STRIPE_API_BASE): connection refused (ECONNREFUSED); starting anyway`,
    );
    expect(stderr).not.toContain(key);
  } finally {
    await database.drop();
  }
}, 60_000);
