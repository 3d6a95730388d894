import { AppError } from "../errors.ts";

/** Bounds concurrent database work; see {@link createLimiter}. */
export interface Limiter {
  /** Runs `fn` once a slot is free. @throws AppError `overloaded` when none frees within the queue timeout (fn never ran). */
  run<T>(fn: () => Promise<T>): Promise<T>;
  /** Requests running and waiting now. */
  readonly active: number;
  readonly waiting: number;
}

/**
 * A FIFO semaphore in front of the connection pool: at most `max` deliveries use the database at
 * once; the next ones wait up to `queueTimeoutMs` ms for a slot, then fail with `overloaded` (503 and
 * Retry-After) before touching the database, so nothing is half-processed and the provider retries.
 * Without it postgres.js would queue every request without bound while the provider's own timeout
 * runs out.
 */
export function createLimiter(max: number, queueTimeoutMs: number): Limiter {
  let active = 0;
  const queue: { grant: () => void; timer: ReturnType<typeof setTimeout> }[] = [];

  function release(): void {
    const next = queue.shift();
    if (next) {
      clearTimeout(next.timer);
      next.grant(); // the slot passes straight to the next waiter
    } else {
      active--;
    }
  }

  function acquire(): Promise<void> {
    if (active < max) {
      active++;
      return Promise.resolve();
    }
    return new Promise<void>((resolve, reject) => {
      const waiter = {
        grant: resolve,
        timer: setTimeout(() => {
          queue.splice(queue.indexOf(waiter), 1);
          reject(
            new AppError(
              "overloaded",
              `Receiver is at capacity (${max} deliveries in progress, none finished within ${queueTimeoutMs} ms); retry later`,
            ),
          );
        }, queueTimeoutMs),
      };
      queue.push(waiter);
    });
  }

  return {
    async run(fn) {
      await acquire();
      try {
        return await fn();
      } finally {
        release();
      }
    },
    get active() {
      return active;
    },
    get waiting() {
      return queue.length;
    },
  };
}
