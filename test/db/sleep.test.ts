// The loops' one pause: a pause longer than a timer holds (RECONCILE_EVERY=30d) must not fire at once.
import { expect, test } from "bun:test";
import { sleep } from "../../src/db/sleep.ts";

test("`sleep()` of 30 days is still pausing after 100 ms (a single timer of that length fires at once) and ends when its signal aborts", async () => {
  const stop = new AbortController();
  let ended = false;
  const pausing = sleep(30 * 86_400_000, stop.signal).then(() => (ended = true));
  await Bun.sleep(100);
  expect(ended).toBe(false);
  stop.abort();
  await pausing;
  expect(ended).toBe(true);
});

test("`sleep()` ends after its time without a signal, and at once with a signal already aborted", async () => {
  const t0 = performance.now();
  await sleep(30);
  expect(performance.now() - t0).toBeGreaterThanOrEqual(25);
  const stop = new AbortController();
  stop.abort();
  await sleep(60_000, stop.signal);
});
