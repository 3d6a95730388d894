// Edge file: the inbox partitions kept ahead while `serve` or `worker` runs (timers).
import type { Db } from "../db/db.ts";
import { ensurePartitions } from "../inbox/partitions.ts";
import type { LogFn } from "../log.ts";

/** How often a running serve or worker creates the weekly inbox partitions ahead, ms: every 6 hours. */
export const PARTITION_UPKEEP_EVERY_MS = 6 * 3_600_000;

/**
 * Every `everyMs` ms (default {@link PARTITION_UPKEEP_EVERY_MS}) until `signal` aborts, runs
 * {@link ensurePartitions}, so a receiver that runs for months without a restart or a scheduled purge still
 * writes each week into its own partition rather than the default one (sql/0026; purge drops only whole
 * week partitions). Logs `{partitions: "created", count}` when it made some, and a failure (the database is
 * down or switching) as one warn line; the next round tries again. Never throws; resolves after `signal` aborts.
 */
export async function keepPartitionsAhead(
  db: Db,
  signal: AbortSignal,
  log: LogFn,
  everyMs: number = PARTITION_UPKEEP_EVERY_MS,
): Promise<void> {
  while (!signal.aborted) {
    await new Promise<void>((resolve) => {
      const timer = setTimeout(resolve, everyMs);
      signal.addEventListener("abort", () => (clearTimeout(timer), resolve()), { once: true });
    });
    if (signal.aborted) return;
    try {
      const count = await ensurePartitions(db);
      if (count > 0) log({ partitions: "created", count });
    } catch (err) {
      log({ partitions: "ensure_failed", error: (err instanceof Error ? err.message : String(err)).slice(0, 300), level: "warn" });
    }
  }
}
