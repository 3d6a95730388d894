import { jsonLines, type LogFn } from "../log.ts";
import type { Db } from "../db/db.ts";
import type { Backoff } from "../inbox/inbox.ts";
import type { HeartbeatSettings } from "./heartbeat.ts";

/** Settings shared by the claim loops (inbox worker, outbox dispatcher); times in ms. */
export interface LoopOptions {
  db: Db;
  /** Abort to shut down: stop claiming, finish in-flight work, then resolve. */
  signal: AbortSignal;
  /** Rows worked on at once. Default 4. */
  concurrency?: number;
  /** Lease per claim. Default 60 000. */
  leaseMs?: number;
  /** Timeout of one row's work; must be < leaseMs. Default 30 000. */
  timeoutMs?: number;
  /** Attempts before needs-review. Default 10. */
  maxAttempts?: number;
  /** Fallback poll when no NOTIFY arrives. Default 5 000. */
  pollMs?: number;
  /** Retry backoff. Default 1 s doubling, capped at 10 min. */
  backoff?: Backoff;
  /** LISTEN for new rows (off behind a transaction pooler). Default true. */
  listen?: boolean;
  /** One JSON line per row; default stdout. */
  log?: LogFn;
  /**
   * The loop's heartbeat row (loop/heartbeat.ts): its host and pid (the entry file's), what it serves,
   * the interval. Default: none (the commands `worker` and `dispatch` always beat).
   */
  heartbeat?: HeartbeatSettings;
}

/** {@link LoopOptions} with every default filled in. */
export type ResolvedLoopOptions = Required<Omit<LoopOptions, "listen" | "heartbeat">> & {
  listen: boolean;
  heartbeat: HeartbeatSettings | undefined;
};

/**
 * Fills the defaults of a claim loop's settings.
 * @throws Error naming `loop` when `timeoutMs >= leaseMs` (work could outlive its lease while still running).
 */
export function resolveLoopOptions(options: LoopOptions, loop: string): ResolvedLoopOptions {
  const resolved: ResolvedLoopOptions = {
    db: options.db,
    signal: options.signal,
    concurrency: options.concurrency ?? 4,
    leaseMs: options.leaseMs ?? 60_000,
    timeoutMs: options.timeoutMs ?? 30_000,
    maxAttempts: options.maxAttempts ?? 10,
    pollMs: options.pollMs ?? 5_000,
    backoff: options.backoff ?? { baseMs: 1_000, capMs: 600_000 },
    listen: options.listen !== false,
    log: options.log ?? jsonLines(),
    heartbeat: options.heartbeat,
  };
  if (resolved.timeoutMs >= resolved.leaseMs) {
    throw new Error(`${loop} timeout (${resolved.timeoutMs} ms) must be shorter than the lease (${resolved.leaseMs} ms)`);
  }
  return resolved;
}
