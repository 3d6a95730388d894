import { AppError } from "../errors.ts";

/** Request body bytes held across all requests at once; see {@link createBodyBudget}. */
export interface BodyBudget {
  /** A request's share: take bytes as they are about to be read, release them all when the request ends. */
  hold(): BodyHold;
  /** Largest total allowed, bytes. */
  readonly limit: number;
  /** Bytes held now. */
  readonly inUse: number;
  /** Most bytes ever held at once (for tests and operators; never above `limit`). */
  readonly peak: number;
}

/** One request's share of a {@link BodyBudget}. */
export interface BodyHold {
  /**
   * Takes `bytes` more, before they are read.
   * @throws AppError `overloaded` (503) when that would pass the limit; nothing is taken then.
   */
  take(bytes: number): void;
  /** Gives back everything this hold took; idempotent. */
  release(): void;
}

/**
 * Bounds the memory held by request bodies being read, verified and processed: a request takes its
 * declared Content-Length (or each streamed chunk) from a budget of `limit` bytes shared by all
 * requests before reading it, and gives it back when its response is ready. A request that does not
 * fit is answered `503 overloaded` before its body is read, so a flood of large bodies (bad signatures
 * included) costs at most `limit` bytes of bodies (plus the copies verification makes of each) instead
 * of growing with the number of connections. A body is accounted as its bytes on the wire.
 */
export function createBodyBudget(limit: number): BodyBudget {
  let inUse = 0;
  let peak = 0;
  return {
    hold() {
      let held = 0;
      return {
        take(bytes) {
          if (inUse + bytes > limit) {
            throw new AppError(
              "overloaded",
              `Receiver is at capacity: ${inUse} bytes of request bodies in flight, ${bytes} more would pass the limit of ${limit}; retry later`,
            );
          }
          inUse += bytes;
          held += bytes;
          if (inUse > peak) peak = inUse;
        },
        release() {
          inUse -= held;
          held = 0;
        },
      };
    },
    limit,
    get inUse() {
      return inUse;
    },
    get peak() {
      return peak;
    },
  };
}
