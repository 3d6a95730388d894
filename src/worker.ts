import type { LogFn } from "./app.ts";
import { claimBatch, releaseClaim, type Claim } from "./claim.ts";
import type { Db } from "./db.ts";
import type { HandlerTable } from "./handler-table.ts";
import { NOTIFY_CHANNEL, type Backoff } from "./inbox.ts";
import { notifierFor, OUTBOX_CHANNEL } from "./notifier.ts";
import { processClaimed } from "./process-claimed.ts";
import { createWakeUp } from "./wake-up.ts";
import { describeError } from "./receive.ts";

/** Settings of {@link runWorker}; times in ms. */
export interface WorkerOptions {
  db: Db;
  /** The handler table for a row's provider and endpoint (the receiver's table: one definition). */
  handlersFor: (provider: string, endpoint: string) => HandlerTable | undefined;
  /** Abort to shut down: stop claiming, finish in-flight rows, then resolve. */
  signal: AbortSignal;
  /** Rows processed at once. Default 4. */
  concurrency?: number;
  /** Lease per claim. Default 60 000. */
  leaseMs?: number;
  /** Statement timeout inside a row's transaction; must be < leaseMs. Default 30 000. */
  timeoutMs?: number;
  /** Attempts before needs-review. Default 10. */
  maxAttempts?: number;
  /** Fallback poll when no NOTIFY arrives. Default 5 000. */
  pollMs?: number;
  /** Retry backoff. Default 1 s doubling, capped at 10 min. */
  backoff?: Backoff;
  /** LISTEN for new rows (off behind a transaction pooler). Default true. */
  listen?: boolean;
  log?: LogFn;
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
  const { db, signal } = options;
  const concurrency = options.concurrency ?? 4;
  const leaseMs = options.leaseMs ?? 60_000;
  const timeoutMs = options.timeoutMs ?? 30_000;
  const maxAttempts = options.maxAttempts ?? 10;
  const pollMs = options.pollMs ?? 5_000;
  const backoff = options.backoff ?? { baseMs: 1_000, capMs: 600_000 };
  const log = options.log ?? ((line) => console.log(JSON.stringify(line)));
  if (timeoutMs >= leaseMs) throw new Error(`Worker timeout (${timeoutMs} ms) must be shorter than the lease (${leaseMs} ms)`);

  // A NOTIFY, a finished row or abort wakes the loop; one arriving while it claims is not lost.
  const { nudge, claiming, sleep } = createWakeUp(signal);
  const listener = options.listen === false ? undefined : await db.listen(NOTIFY_CHANNEL, nudge).catch((err) => {
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
