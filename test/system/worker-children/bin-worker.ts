// Child for test/system/worker-crash.test.ts: the real worker entry file, src/bin/worker.ts (its argv, env
// and signal handling unchanged), behind a 30 s self-exit (status 3) so that a worker the test never
// stops cannot outlive the test run.
setTimeout(() => {
  console.error("SELF_EXIT: the worker was never stopped");
  process.exit(3);
}, 30_000).unref();

export {};

await import("../../../src/bin/worker.ts");
