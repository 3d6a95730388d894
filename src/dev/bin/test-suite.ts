// Entry file: `bun run test [--quick] [--jobs N] [--update-timings] [bun test arguments…]`, the README's test
// command. Starts ONE throwaway PostgreSQL for the whole run (or uses DATABASE_URL's server) with the
// migrated template database, then runs `bun test --parallel=N --no-isolate` over it: test files in N
// worker processes (default two per core, at most 8; TEST_JOBS), each file in its own database
// (test/support/helpers.ts freshDatabase), the slowest files first (test/timings.json, refreshed with
// --update-timings). --quick runs the core contract only (QUICK below). Stops the server when bun test
// ends, or on SIGINT/SIGTERM (exit 130/143). Runtime-specific (child processes); never imported by the
// product.
import { spawn } from "node:child_process";
import { availableParallelism } from "node:os";
import { resolve } from "node:path";
import { parseArgs } from "node:util";
import { startTestCluster, type TestCluster } from "../test-cluster.ts";

/**
 * The core contract, for `--quick` (under 90 s on 2 cores): the inbox key and the seed's table in sync
 * mode, concurrent duplicates on one key, the two classic mistakes beside the receiver under a real
 * SIGKILL (seed §2), the HTTP contract and bad input, async mode with the worker and a worker SIGKILLed
 * mid-work, the handler tables' contract suite (redelivery, any order, every mode), money going out,
 * migrations.
 */
export const QUICK = [
  "test/inbox/inbox-key.test.ts",
  "test/receiver/receive.test.ts",
  "test/receiver/sync-conflict.test.ts",
  "test/system/broken-receivers.test.ts",
  "test/system/killed-receiver.test.ts",
  "test/receiver/app.test.ts",
  "test/receiver/bad-input.test.ts",
  "test/worker/worker.test.ts",
  "test/system/worker-crash.test.ts",
  "test/contracts/billing-handlers.test.ts",
  "test/contracts/stripe-provider.test.ts",
  "test/handlers/money-out.test.ts",
  "test/db/migrate.test.ts",
];

const USAGE = "Usage: bun run test [--quick] [--jobs N] [--update-timings] [bun test arguments, e.g. files or -t PATTERN]";
const ROOT = resolve(import.meta.dir, "../../..");
const TIMINGS = "test/timings.json";
/**
 * bun test's default per-test timeout is 5 s; beside three other files on 2 cores a test that takes 1–2 s
 * alone can take longer. A timeout here only guards against a hang (speed is measured by the benchmarks,
 * never by a test), so the runner's default is 30 s; a test's own timeout still wins.
 */
const TIMEOUT_MS = 30_000;

const { values: o, positionals } = parseArgs({
  options: {
    quick: { type: "boolean", default: false },
    jobs: { type: "string" },
    "update-timings": { type: "boolean", default: false },
    help: { type: "boolean", short: "h" },
  },
  allowPositionals: true,
  strict: false,
});
if (o.help) {
  console.log(USAGE);
  process.exit(0);
}
// Most of a test's time is spent waiting (on PostgreSQL, on a child process, on a lease): two workers a core.
const jobs = Number(o.jobs ?? process.env.TEST_JOBS ?? Math.min(8, 2 * availableParallelism()));
if (!Number.isInteger(jobs) || jobs < 1 || jobs > 16) {
  console.error(`${USAGE}\n--jobs (TEST_JOBS) takes a whole number from 1 to 16, got "${o.jobs ?? process.env.TEST_JOBS}"`);
  process.exit(2);
}
// parseArgs with strict: false keeps unknown flags (bun test's own, e.g. -t, --bail) among the values:
// pass the original arguments on, minus ours.
const ours = new Set(["--quick", "--update-timings", "--jobs"]);
const passOn: string[] = [];
const argv = process.argv.slice(2);
for (let i = 0; i < argv.length; i++) {
  const a = argv[i]!;
  if (a === "--jobs") i++;
  else if (!ours.has(a) && !a.startsWith("--jobs=")) passOn.push(a);
}
void positionals;
const files = o.quick ? QUICK : [];

let cluster: TestCluster | undefined;
let child: ReturnType<typeof spawn> | undefined;
let stopping = false;
for (const signal of ["SIGINT", "SIGTERM"] as const) {
  process.on(signal, () => {
    if (stopping) return;
    stopping = true;
    child?.kill(signal);
    const end = () => void (cluster?.stop() ?? Promise.resolve()).finally(() => process.exit(signal === "SIGINT" ? 130 : 143));
    if (child && child.exitCode === null) child.once("exit", end);
    else end();
  });
}

const started = Date.now();
try {
  cluster = await startTestCluster(process.env.DATABASE_URL);
} catch (err) {
  console.error(`bun run test: cannot start the test database: ${err instanceof Error ? err.message : String(err)}`);
  process.exit(1);
}
const args = [
  "test",
  `--parallel=${jobs}`,
  "--no-isolate",
  `--timeout=${TIMEOUT_MS}`,
  `--timings=${TIMINGS}`,
  ...(o["update-timings"] ? ["--update-timings"] : []),
  ...files,
  ...passOn,
];
child = spawn(process.execPath, args, { cwd: ROOT, stdio: "inherit", env: { ...process.env, TEST_ADMIN_URL: cluster.url } });
const code = await new Promise<number>((done) => child!.once("exit", (c, s) => done(c ?? (s ? 1 : 0))));
if (stopping) await new Promise(() => {}); // the signal handler stops the server and exits
await cluster.stop();
console.log(
  `bun run test: ${o.quick ? "the quick set" : "the suite"} in ${Math.round((Date.now() - started) / 1000)} s with ${jobs} workers (exit ${code})`,
);
process.exit(code);
