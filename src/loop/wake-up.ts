import { sleep } from "../db/sleep.ts";

/**
 * The sleep of a claim loop (inbox worker, outbox dispatcher): `sleep(ms)` waits until `ms` pass, a
 * `nudge()` (a NOTIFY, a finished row) or `signal` aborts. A nudge that arrives while the loop is busy
 * claiming is remembered: the next `sleep()` returns at once, so no wake-up is lost. Call `claiming()`
 * just before each claim to forget the nudges that claim will cover.
 */
export interface WakeUp {
  nudge(): void;
  claiming(): void;
  sleep(ms: number): Promise<void>;
}

/** Creates a {@link WakeUp} that `signal`'s abort also nudges. */
export function createWakeUp(signal: AbortSignal): WakeUp {
  let woken = false;
  /** Ends the pause under way (a no-op once it has ended). */
  let wake = () => {};
  const nudge = () => {
    woken = true;
    wake();
  };
  signal.addEventListener("abort", nudge);
  return {
    nudge,
    claiming() {
      woken = false;
    },
    sleep(ms) {
      if (woken || signal.aborted) return Promise.resolve();
      const nap = new AbortController();
      wake = () => nap.abort();
      return sleep(ms, nap.signal); // db/sleep.ts's, not this method
    },
  };
}
