import { describeError } from "../errors.ts";
import type { ResolvedLoopOptions } from "./loop-options.ts";
import { createWakeUp } from "./wake-up.ts";
import { sleep as pause } from "../db/sleep.ts";
import { startHeartbeat } from "./heartbeat.ts";

/**
 * Shortest time, ms, from one claim to the next that a NOTIFY (not a full claim, not work left due)
 * starts: every receiver's NOTIFY wakes every worker process, and without it most of their claims
 * would find nothing (the herd). River sends at most one notification per queue per 100 ms for the same reason.
 */
export const NOTIFY_CLAIM_GAP_MS = 100;

/** What {@link runClaimLoop} runs: the loop's settings, the channel that wakes it, and how it claims and works. */
export interface ClaimLoop<T> extends Pick<
  ResolvedLoopOptions,
  "db" | "signal" | "concurrency" | "pollMs" | "listen" | "log" | "heartbeat"
> {
  /** First field of the loop's own log lines, e.g. `{ worker: "claim_failed" }`, and its heartbeat row's kind. */
  label: "worker" | "dispatcher";
  /** LISTEN/NOTIFY channel whose notifications wake the loop. */
  channel: string;
  /**
   * Claims at most `free` units of work (each leased to this loop), one per free slot; `more`: the claim
   * took all it could, so more may be due and the loop claims again without waiting.
   */
  claim(free: number): Promise<{ units: T[]; more: boolean }>;
  /**
   * Works on one claimed unit in its slot; `claimedAt` is when its claim started, ms since the epoch.
   * Resolves true when it left work due at once (the loop then claims again without waiting for a
   * NOTIFY or the poll). Must not reject.
   */
  work(unit: T, claimedAt: number): Promise<boolean | void>;
  /** How many rows a unit holds, for the heartbeat's count of claimed rows; default 1. */
  size?(unit: T): number;
}

/**
 * The claim loop of the inbox worker and the outbox dispatcher: LISTENs on `channel` (unless `listen`
 * is off; a LISTEN that fails is logged `{ <label>: "listen_failed" }` and the loop polls), then while
 * `signal` is not aborted claims as many units as slots are free (one claim statement) and starts
 * `work` on each at once, so a unit is claimed only when a slot can start it. It claims again at once
 * after a claim that took all it could (`more`) or a unit whose work left more due;
 * otherwise it waits for a NOTIFY or `pollMs`, so a finished unit alone never costs a claim that finds
 * nothing, and claims on NOTIFYs at most once per {@link NOTIFY_CLAIM_GAP_MS}. A failed claim is logged `{ <label>: "claim_failed" }` at level warn and retried after
 * `pollMs` (at most 1 s); it never ends the loop. With `heartbeat` settings the loop beats its row
 * (loop/heartbeat.ts: one upsert per interval carrying the claims counted in memory) from start until
 * `signal` aborts, then marks it stopped. Resolves after `signal` aborts and the work in flight finished.
 */
export async function runClaimLoop<T>(loop: ClaimLoop<T>): Promise<void> {
  const { db, signal, concurrency, pollMs, log, label } = loop;
  // A NOTIFY, work that left more due, or abort wakes the loop; one arriving while it claims is not lost.
  const { nudge, claiming, sleep } = createWakeUp(signal);
  const heartbeat = loop.heartbeat && startHeartbeat(db, label, loop.heartbeat, log, signal);
  const listener = !loop.listen
    ? undefined
    : await db.listen(loop.channel, nudge).catch((err) => {
        log({ [label]: "listen_failed", error: describeError(err) });
        return undefined;
      });

  const inFlight = new Set<Promise<unknown>>();
  let more = true; // the last claim took all it could
  let due = false; // a unit's work left more due at once
  let lastClaimAt = 0;
  let dueNow: (() => void) | undefined; // ends the NOTIFY gap's pause when a unit leaves more due
  while (!signal.aborted) {
    const free = concurrency - inFlight.size;
    if (free === 0) {
      // Every slot is busy: wait for one to finish. (Not sleep(): a pending nudge is cleared only by a
      // claim, so sleep() would return at once and this loop would spin.)
      await Promise.race(inFlight);
      continue;
    }
    if (!more && !due) {
      await sleep(pollMs); // at once when a NOTIFY came since the last claim
      // NOTIFYs from every sender reach every loop: claim on them at most once per NOTIFY_CLAIM_GAP_MS.
      // Work that leaves more due (a released row, an account under its bound again) ends the pause.
      const gap = lastClaimAt + NOTIFY_CLAIM_GAP_MS - Date.now();
      if (!due && gap > 0) {
        const ended = new AbortController();
        dueNow = () => ended.abort();
        await pause(gap, AbortSignal.any([signal, ended.signal]));
        dueNow = undefined;
      }
      if (signal.aborted) break;
    }
    due = false;
    claiming();
    let units: T[];
    const claimedAt = Date.now();
    lastClaimAt = claimedAt;
    try {
      ({ units, more } = await loop.claim(free));
      heartbeat?.claimed(units.reduce((n, u) => n + (loop.size?.(u) ?? 1), 0));
    } catch (err) {
      log({ [label]: "claim_failed", error: describeError(err), level: "warn" });
      await sleep(Math.min(pollMs, 1_000));
      more = true;
      continue;
    }
    for (const unit of units) {
      const p: Promise<unknown> = loop.work(unit, claimedAt).then(
        (again) => {
          inFlight.delete(p);
          if (again) ((due = true), nudge(), dueNow?.());
        },
        () => inFlight.delete(p),
      );
      inFlight.add(p);
    }
  }
  await Promise.all(inFlight);
  await listener?.unlisten().catch(() => {});
  await heartbeat?.stopped();
}
