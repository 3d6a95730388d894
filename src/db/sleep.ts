// The one abortable pause of the loops (worker, dispatcher, catch-up, failover watch, waiting for the
// database), and the one time bound of a promise. In db/, the lowest folder all of them may import
// (test/architecture.test.ts).

/**
 * Resolves after `ms`, or as soon as `signal` aborts (at once when it already has: a stop during the
 * work before the pause). Never rejects: a loop checks `signal` itself. Its abort listener goes when
 * the pause ends, so a long-lived signal does not collect one per pause. A pause longer than a timer
 * holds (2^31 − 1 ms, about 24.8 days: a longer one fires at once) is taken in several.
 */
export async function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  const end = Date.now() + ms;
  do await pause(Math.min(end - Date.now(), MAX_TIMER_MS), signal);
  while (Date.now() < end && !signal?.aborted);
}

/** The longest delay `setTimeout` keeps, ms. */
const MAX_TIMER_MS = 2 ** 31 - 1;

/**
 * Settles like `work`, or rejects with `timeout()` once `ms` ms (at least 0) have passed, whichever comes
 * first. `work` is not stopped (`timeout` may stop it, e.g. by aborting it): what it does later is ignored.
 */
export function within<T>(work: Promise<T>, ms: number, timeout: () => Error): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    const timer = setTimeout(() => reject(timeout()), Math.max(0, ms));
    work.then(
      (value) => (clearTimeout(timer), resolve(value)),
      (err: unknown) => (clearTimeout(timer), reject(err)),
    );
  });
}

function pause(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal?.aborted) return resolve();
    const done = () => (clearTimeout(timer), signal?.removeEventListener("abort", done), resolve());
    const timer = setTimeout(done, Math.max(0, ms));
    signal?.addEventListener("abort", done, { once: true });
  });
}
