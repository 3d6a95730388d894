import { claimBatch, releaseClaim, type Claim } from "./claim.ts";
import type { HandlerTable } from "../handlers/handler-table.ts";
import { NOTIFY_CHANNEL } from "../inbox/inbox.ts";
import { resolveLoopOptions, type LoopOptions } from "../loop/loop-options.ts";
import { notifierFor, OUTBOX_CHANNEL } from "../inbox/notifier.ts";
import { processBatch } from "./process-batch.ts";
import { createWakeUp } from "../loop/wake-up.ts";
import { describeError } from "../errors.ts";
import { assertPatchedPostgres } from "../db/patched-postgres.ts";
import type { Fetcher } from "./stripe-fetch.ts";
import { deferClaim, processFetched, type FetchedOptions } from "./process-fetched.ts";

const NO_FETCHER = "Thin event waits: this worker has no Stripe API settings (STRIPE_API_KEY, STRIPE_API_BASE) to fetch what it points to";

/** Settings of {@link runWorker}; times in ms (the shared ones in {@link LoopOptions}). */
export interface WorkerOptions extends LoopOptions {
  /** The handler table for a row's provider and endpoint (the receiver's table: one definition). */
  handlersFor: (provider: string, endpoint: string) => HandlerTable | undefined;
  /**
   * Rows a slot applies in one transaction (one commit), see {@link processBatch}. Default 8; 1 gives
   * every row its own transaction. A failing row makes its batch redo each row on its own.
   */
  batchSize?: number;
  /**
   * Reads from the Stripe API what thin rows point to and what refetch endpoints' rows are about
   * (stripe-fetch.ts); such rows are processed one by one with {@link processFetched}. Without it, thin
   * rows are deferred (due again later, no attempt used) with a `last_error` saying so.
   */
  fetcher?: Fetcher;
  /** Told about each backfill request a health notification recorded, after its commit. */
  onBackfillRequested?: FetchedOptions["onBackfillRequested"];
}

/**
 * The async-mode worker loop (seed §6): claim due rows in batches into a local queue (up to two rounds
 * of work: `2 × concurrency × batchSize` rows in hand), let each of `concurrency` slots take up to
 * `batchSize` of them and apply them with {@link processBatch} (one commit per batch, per-row redo
 * when a batch fails), sleep until a NOTIFY, a freed slot or the poll interval. Logs one line per
 * row: event id, type, attempt, outcome, duration ms (never the payload). Resolves after `signal`
 * aborts and in-flight rows finished. Database errors while claiming are logged and retried after
 * the poll interval (capped at 1 s); they never end the loop.
 * @throws Error when `timeoutMs >= leaseMs` (a row could outlive its lease while still running), or
 *   when `batchSize` is not a whole number ≥ 1, or when the postgres.js loaded is unpatched ({@link assertPatchedPostgres}).
 */
export async function runWorker(options: WorkerOptions): Promise<void> {
  assertPatchedPostgres();
  const { db, signal, concurrency, leaseMs, timeoutMs, maxAttempts, pollMs, backoff, listen, log } = resolveLoopOptions(options, "Worker");

  // A NOTIFY, a finished row or abort wakes the loop; one arriving while it claims is not lost.
  const { nudge, claiming, sleep } = createWakeUp(signal);
  const listener = !listen
    ? undefined
    : await db.listen(NOTIFY_CHANNEL, nudge).catch((err) => {
        log({ worker: "listen_failed", error: describeError(err) });
        return undefined;
      });

  const batchSize = options.batchSize ?? 8;
  if (!Number.isSafeInteger(batchSize) || batchSize < 1) throw new Error(`Worker batchSize must be a whole number ≥ 1, got ${batchSize}`);
  const inFlight = new Set<Promise<void>>();
  const outbox = notifierFor(db, OUTBOX_CHANNEL);
  async function work(claims: Claim[]): Promise<void> {
    const started = Date.now();
    const line = (claim: Claim) => ({ event_id: claim.eventId, endpoint: claim.endpoint, type: claim.eventType, attempt: claim.attempt });
    try {
      const processOptions = { handlersFor: options.handlersFor, timeoutMs, maxAttempts, backoff };
      const fetcher = options.fetcher;
      const viaApi = claims.filter((c) => c.provider === "stripe-thin" || fetcher?.needsFetch(c));
      for (const claim of viaApi) {
        const result = fetcher
          ? await processFetched(db, claim, fetcher, { ...processOptions, onBackfillRequested: options.onBackfillRequested })
          : await deferClaim(db, claim, NO_FETCHER, processOptions).then(() => ({ outcome: "deferred", error: NO_FETCHER }));
        if (result.outcome === "processed") outbox.wake();
        log({
          ...line(claim),
          outcome: result.outcome,
          ...(result.error ? { error: result.error } : {}),
          duration_ms: Date.now() - started,
        });
      }
      claims = claims.filter((c) => !viaApi.includes(c));
      if (claims.length === 0) return;
      const results = await processBatch(db, claims, processOptions);
      if (results.some((r) => r.outcome === "processed")) outbox.wake(); // their handlers may have written outbox rows
      for (const r of results) {
        log({
          ...line(r.claim),
          outcome: r.outcome,
          ...(r.error ? { error: r.error } : {}),
          ...(r.batchError ? { batch_error: r.batchError } : {}),
          duration_ms: Date.now() - started,
        });
      }
    } catch (err) {
      // Not expected (processBatch reports failures as outcomes): the leases expire and the rows are claimed again.
      for (const claim of claims) log({ ...line(claim), outcome: "failed", error: describeError(err), duration_ms: Date.now() - started });
    }
  }

  // Claimed rows wait here for a slot, so one claim statement serves several batches. Their lease
  // runs meanwhile: a few batch times, far below it.
  const queue: Claim[] = [];
  const start = (claims: Claim[]) => {
    const p: Promise<void> = work(claims).finally(() => {
      inFlight.delete(p);
      nudge();
    });
    inFlight.add(p);
  };
  const fillSlots = () => {
    // Spread the queue over the free slots (a short queue is not all taken by the first slot).
    while (inFlight.size < concurrency && queue.length > 0) {
      start(queue.splice(0, Math.min(batchSize, Math.ceil(queue.length / (concurrency - inFlight.size)))));
    }
  };
  const parkedLog = (rows: { eventId: string; endpoint: string; eventType: string; attempts: number }[]) => {
    for (const r of rows)
      log({
        event_id: r.eventId,
        endpoint: r.endpoint,
        type: r.eventType,
        attempt: r.attempts,
        outcome: "needs_review",
        error: "attempt limit reached with no outcome recorded",
      });
  };

  const round = concurrency * batchSize;
  while (!signal.aborted) {
    fillSlots();
    // Invariant: a non-empty queue means every slot is busy. Refill once less than half a round waits.
    const room = 2 * round - inFlight.size * batchSize - queue.length;
    let found = room;
    if (queue.length <= round / 2 && room > 0) {
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
