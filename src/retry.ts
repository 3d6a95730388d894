/** How {@link retry} tries again. Durations in ms. */
export interface RetryOptions {
  /** Tries in all, the first included (≥ 1). */
  tries: number;
  /** A short reason (for logs) when `err` is worth another try; undefined when it is final. */
  retryable: (err: unknown) => string | undefined;
  /** Wait before try `n + 1` after try `n` failed (1-based); default no wait. */
  waitMs?: (n: number) => number;
  /** Told before each wait: the try that failed, the wait, the reason and the error itself. */
  onRetry?: (n: number, waitMs: number, reason: string, err: unknown) => void;
  /** Replaces the timer (tests). */
  sleep?: (ms: number) => Promise<void>;
}

/**
 * The project's one retry loop: runs `work` until it succeeds, trying again (after `waitMs`, when
 * given) while it fails with an error `retryable` accepts, up to `tries` tries in all. Used for
 * transactions PostgreSQL rolled back because of a concurrent one (apply-event.ts) and for Stripe API
 * calls (stripe-api/retry.ts).
 * @throws the first final error at once, or the last error when the tries run out.
 */
export async function retry<T>(work: (n: number) => Promise<T>, options: RetryOptions): Promise<T> {
  const sleep = options.sleep ?? ((ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms)));
  for (let n = 1; ; n++) {
    try {
      return await work(n);
    } catch (err) {
      const reason = options.retryable(err);
      if (reason === undefined || n >= options.tries) throw err;
      const waitMs = options.waitMs?.(n) ?? 0;
      options.onRetry?.(n, waitMs, reason, err);
      if (waitMs > 0) await sleep(waitMs);
    }
  }
}
