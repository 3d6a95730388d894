// Child for test/system/worker-crash.test.ts: the real worker entry file, src/bin/worker.ts (its argv, env
// and signal handling unchanged), behind a self-exit (status 3) after
// TEST_CHILD_SELF_EXIT_MS ms (default 30 s) so that a worker the test never stops cannot outlive the test run.
setTimeout(
  () => {
    console.error("SELF_EXIT: the worker was never stopped");
    process.exit(3);
  },
  Number(process.env.TEST_CHILD_SELF_EXIT_MS ?? 30_000),
).unref();

export {};

await import("../../../src/bin/worker.ts");
