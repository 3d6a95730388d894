import { claimBatch, releaseClaim, type Claim } from "./claim.ts";
import type { HandlerTable } from "./handler-table.ts";
import { NOTIFY_CHANNEL } from "./inbox.ts";
import { resolveLoopOptions, type LoopOptions } from "./loop-options.ts";
import { notifierFor, OUTBOX_CHANNEL } from "./notifier.ts";
import { processClaimed } from "./process-claimed.ts";
import { createWakeUp } from "./wake-up.ts";
import { describeError } from "./receive.ts";

/** Settings of {@link runWorker}; times in ms (the shared ones in {@link LoopOptions}). */
export interface WorkerOptions extends LoopOptions {
  /** The handler table for a row's provider and endpoint (the receiver's table: one definition). */
  handlersFor: (provider: string, endpoint: string) => HandlerTable | undefined;
}

/**
 * The async-mode worker loop (seed §6): claim due rows in batches (up to the free slots plus a local
 * queue of `concurrency` rows), process each in its own transaction, sleep until a NOTIFY, a freed
 * slot or the poll interval. Logs one line per
 * row: event id, type, attempt, outcome, duration ms (never the payload). Resolves after `signal`
 * aborts and in-flight rows finished. Database errors while claiming are logged and retried after
 * the poll interval (capped at 1 s); they never end the loop.
 * @throws Error when `timeoutMs >= leaseMs` (a row could outlive its lease while still running).
 */
export async function runWorker(options: WorkerOptions): Promise<void> {
  const { db, signal, concurrency, leaseMs, timeoutMs, maxAttempts, pollMs, backoff, listen, log } = resolveLoopOptions(options, "Worker");

  // A NOTIFY, a finished row or abort wakes the loop; one arriving while it claims is not lost.
  const { nudge, claiming, sleep } = createWakeUp(signal);
  const listener = !listen ? undefined : await db.listen(NOTIFY_CHANNEL, nudge).catch((err) => {
    log({ worker: "listen_failed", error: describeError(err) });
    return undefined;
  });

  const inFlight = new Set<Promise<void>>();
  const outbox = notifierFor(db, OUTBOX_CHANNEL);
  async function work(claim: Claim): Promise<void> {
    const started = Date.now();
    const line = { event_id: claim.eventId, endpoint: claim.endpoint, type: claim.eventType, attempt: claim.attempt };
    try {
      const result = await processClaimed(db, claim, { handlersFor: options.handlersFor, timeoutMs, maxAttempts, backoff });
      if (result.outcome === "processed") outbox.wake(); // its handler may have written outbox rows
      log({ ...line, outcome: result.outcome, ...(result.error ? { error: result.error } : {}), duration_ms: Date.now() - started });
    } catch (err) {
      // Recording the failure failed too: the lease expires and the row is claimed again.
      log({ ...line, outcome: "failed", error: describeError(err), duration_ms: Date.now() - started });
    }
  }

  // Claimed rows wait here for a slot (a local queue of up to `concurrency` rows), so one claim
  // statement serves several rows. Their lease runs meanwhile: a few processing times, far below it.
  const queue: Claim[] = [];
  const start = (claim: Claim) => {
    const p: Promise<void> = work(claim).finally(() => {
      inFlight.delete(p);
      nudge();
    });
    inFlight.add(p);
  };
  const fillSlots = () => {
    while (inFlight.size < concurrency && queue.length > 0) start(queue.shift() as Claim);
  };
  const parkedLog = (rows: { eventId: string; endpoint: string; eventType: string; attempts: number }[]) => {
    for (const r of rows) log({ event_id: r.eventId, endpoint: r.endpoint, type: r.eventType, attempt: r.attempts, outcome: "needs_review", error: "attempt limit reached with no outcome recorded" });
  };

  while (!signal.aborted) {
    fillSlots();
    // Invariant: a non-empty queue means every slot is busy. Refill once it is half empty.
    const room = 2 * concurrency - inFlight.size - queue.length;
    let found = room;
    if (queue.length <= concurrency / 2 && room > 0) {
      claiming();
      try {
        const claims = await claimBatch(db, { limit: room, leaseMs, maxAttempts, onParked: parkedLog });
        queue.push(...claims);
        found = claims.length;
      } catch (err) {
        log({ worker: "claim_failed", error: describeError(err) });
        await sleep(Math.min(pollMs, 1_000));
        continue;
      }
      fillSlots();
    }
    if (inFlight.size === concurrency) {
      // Every slot is busy: wait for one to finish. (Not sleep(): a pending nudge is cleared only by a
      // claim, so sleep() would return at once and this loop would spin and starve its own rows.)
      await Promise.race(inFlight);
      continue;
    }
    // A slot is free and the queue is empty: the last claim found fewer rows than it asked for.
    if (found < room) await sleep(pollMs);
  }
  // Shutdown: rows claimed but never started go back, their attempt not counted.
  for (const claim of queue.splice(0)) {
    await releaseClaim(db, claim).catch((err) => log({ worker: "release_failed", event_id: claim.eventId, error: describeError(err) }));
  }
  await Promise.all(inFlight);
  await listener?.unlisten().catch(() => {});
}
