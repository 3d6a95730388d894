import { retry } from "../retry.ts";

/** Backoff of {@link withStripeRetry}. All durations in ms. */
export interface StripeRetryOptions {
  /** Tries in all, the first included; default 8. */
  attempts?: number;
  /** First wait, ms; doubled per retry with full jitter; default 250. */
  baseMs?: number;
  /** Longest single wait, ms; default 8000. */
  maxMs?: number;
  /**
   * Called before each wait with the try that failed (1-based), the wait (ms), a short reason (status or
   * error code, never the key) and the stripe-node error (for describeStripeFailure).
   */
  onRetry?: (attempt: number, waitMs: number, reason: string, err: unknown) => void;
  /** Replaces the timer (tests). */
  sleep?: (ms: number) => Promise<void>;
}

/**
 * Whether a failure from stripe-node is worth another try: HTTP 429 (rate limited), 409 (lock
 * conflict), 5xx, or no response at all (connection error, timeout). Follows Stripe's "Error
 * handling" and "Rate limits" docs: retry these with exponential backoff; 4xx otherwise are final.
 * Returns a short reason for logs, or undefined when the error is final.
 */
export function retryableStripeError(err: unknown): string | undefined {
  if (typeof err !== "object" || err === null) return undefined;
  const e = err as { statusCode?: unknown; type?: unknown; code?: unknown };
  if (typeof e.statusCode === "number") {
    if (e.statusCode === 429 || e.statusCode === 409 || e.statusCode >= 500) return `HTTP ${e.statusCode}`;
    return undefined;
  }
  if (e.type === "StripeConnectionError" || e.type === "StripeAPIError") return typeof e.code === "string" ? e.code : String(e.type);
  return undefined;
}

/**
 * Runs `call` until it succeeds, retrying failures {@link retryableStripeError} accepts with capped
 * exponential backoff and full jitter (Stripe docs, "Error handling"), through the project's one
 * retry loop ({@link retry}).
 * @throws the last error when tries run out, or the first final (non-retryable) error at once.
 */
export function withStripeRetry<T>(call: () => Promise<T>, options: StripeRetryOptions = {}): Promise<T> {
  const baseMs = options.baseMs ?? 250;
  const maxMs = options.maxMs ?? 8000;
  return retry(call, {
    tries: options.attempts ?? 8,
    retryable: retryableStripeError,
    waitMs: (n) => Math.round(Math.random() * Math.min(maxMs, baseMs * 2 ** (n - 1))),
    onRetry: options.onRetry,
    sleep: options.sleep,
  });
}
