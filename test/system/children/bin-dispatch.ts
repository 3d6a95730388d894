// Child for test/system/failover.test.ts: the real dispatcher entry file, src/bin/dispatch.ts (its env and
// signal handling unchanged), behind a 60 s self-exit (status 3) so that a dispatcher the test never stops
// cannot outlive the test run.
setTimeout(() => {
  console.error("SELF_EXIT: the dispatcher was never stopped");
  process.exit(3);
}, 60_000).unref();

export {};

await import("../../../src/bin/dispatch.ts");
