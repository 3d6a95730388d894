import { describeError } from "../errors.ts";
import type { ResolvedLoopOptions } from "./loop-options.ts";
import { createWakeUp } from "./wake-up.ts";

/** What {@link runClaimLoop} runs: the loop's settings, the channel that wakes it, and how it claims and works. */
export interface ClaimLoop<T> extends Pick<ResolvedLoopOptions, "db" | "signal" | "concurrency" | "pollMs" | "listen" | "log"> {
  /** First field of the loop's own log lines, e.g. `{ worker: "claim_failed" }`. */
  label: string;
  /** LISTEN/NOTIFY channel whose notifications wake the loop. */
  channel: string;
  /** Claims at most `limit` due items (each leased to this loop). */
  claim(limit: number): Promise<T[]>;
  /** Works on one claimed item in its slot; `claimedAt` is when its claim started, ms since the epoch. Must not reject. */
  work(item: T, claimedAt: number): Promise<void>;
}

/**
 * The claim loop of the inbox worker and the outbox dispatcher: LISTENs on `channel` (unless `listen`
 * is off; a LISTEN that fails is logged `{ <label>: "listen_failed" }` and the loop polls), then while
 * `signal` is not aborted claims as many items as slots are free and starts `work` on each at once, so
 * an item is claimed only when a slot can start it. It claims again at once when the batch filled
 * every free slot (more may be due), else sleeps until a NOTIFY, a finished item or `pollMs`. A failed
 * claim is logged `{ <label>: "claim_failed" }` at level warn and retried after `pollMs` (at most 1 s);
 * it never ends the loop. Resolves after `signal` aborts and the work in flight finished.
 */
export async function runClaimLoop<T>(loop: ClaimLoop<T>): Promise<void> {
  const { db, signal, concurrency, pollMs, log, label } = loop;
  // A NOTIFY, a finished item or abort wakes the loop; one arriving while it claims is not lost.
  const { nudge, claiming, sleep } = createWakeUp(signal);
  const listener = !loop.listen
    ? undefined
    : await db.listen(loop.channel, nudge).catch((err) => {
        log({ [label]: "listen_failed", error: describeError(err) });
        return undefined;
      });

  const inFlight = new Set<Promise<void>>();
  while (!signal.aborted) {
    const free = concurrency - inFlight.size;
    if (free === 0) {
      // Every slot is busy: wait for one to finish. (Not sleep(): a pending nudge is cleared only by a
      // claim, so sleep() would return at once and this loop would spin.)
      await Promise.race(inFlight);
      continue;
    }
    claiming();
    let items: T[];
    const claimedAt = Date.now();
    try {
      items = await loop.claim(free);
    } catch (err) {
      log({ [label]: "claim_failed", error: describeError(err), level: "warn" });
      await sleep(Math.min(pollMs, 1_000));
      continue;
    }
    for (const item of items) {
      const p: Promise<void> = loop.work(item, claimedAt).finally(() => {
        inFlight.delete(p);
        nudge();
      });
      inFlight.add(p);
    }
    // Invariant: claim again at once only when the batch filled every free slot (more may be due).
    if (items.length < free) await sleep(pollMs);
  }
  await Promise.all(inFlight);
  await listener?.unlisten().catch(() => {});
}
