// Child for test/system/faults.test.ts: the real receiver entry file, src/bin/serve.ts (its env and signal
// handling unchanged), behind a 30 s self-exit (status 3) so that a receiver the test never stops
// cannot outlive the test run.
setTimeout(() => {
  console.error("SELF_EXIT: the receiver was never stopped");
  process.exit(3);
}, 30_000).unref();

export {};

await import("../../../src/bin/serve.ts");
