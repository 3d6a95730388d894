import { OUTBOX_CHANNEL } from "../notifier.ts";
import type { LogFn } from "../app.ts";
import type { Db } from "../db.ts";
import type { Backoff } from "../inbox.ts";
import { describeError } from "../receive.ts";
import { createWakeUp } from "../wake-up.ts";
import { claimOutboxBatch, type OutboxMessage } from "./claim.ts";
import { deliverClaimed, type SendFn } from "./deliver-claimed.ts";

/** LISTEN/NOTIFY channel that wakes dispatchers: sent after a processed event's commit (src/notifier.ts). */
export { OUTBOX_CHANNEL };

/** Settings of {@link runDispatcher}; times in ms. */
export interface DispatcherOptions {
  db: Db;
  /** Where messages go: `httpSink(…)`, `handlerSink(…)` or any {@link SendFn}. */
  send: SendFn;
  /** Abort to shut down: stop claiming, finish in-flight deliveries, then resolve. */
  signal: AbortSignal;
  /** Deliveries at once. Default 4. */
  concurrency?: number;
  /** Lease per claim. Default 60 000. */
  leaseMs?: number;
  /** Send timeout; must be < leaseMs. Default 30 000. */
  timeoutMs?: number;
  /** Attempts before needs-review. Default 10. */
  maxAttempts?: number;
  /** Fallback poll when no NOTIFY arrives. Default 5 000. */
  pollMs?: number;
  /** Retry backoff. Default 1 s doubling, capped at 10 min. */
  backoff?: Backoff;
  /**
   * Deliver each aggregate's rows one at a time in `id` order (see `claimOutboxBatch`). Every
   * dispatcher on the table must agree. A parked row blocks its aggregate until it is requeued.
   * Default false.
   */
  ordered?: boolean;
  /** LISTEN for new rows (off behind a transaction pooler). Default true. */
  listen?: boolean;
  log?: LogFn;
}

/**
 * The outbox dispatcher loop, shaped like the inbox worker (`runWorker`): claim due rows in batches
 * up to the free slots (each claim a new fencing token), deliver each with {@link deliverClaimed},
 * sleep until a NOTIFY, a freed slot or the poll interval. Logs one line per delivery: outbox id,
 * message id, type, aggregate, attempt, token, outcome, duration ms (never the payload); a `stale`
 * outcome means a mark or failure record was refused because the lease had expired and another
 * dispatcher owned the row. Resolves after `signal` aborts and in-flight deliveries finished (each
 * bounded by `timeoutMs`). Database errors are logged and retried after the poll interval (capped at
 * 1 s); they never end the loop.
 * @throws Error when `timeoutMs >= leaseMs` (a delivery could outlive its lease while still running).
 */
export async function runDispatcher(options: DispatcherOptions): Promise<void> {
  const { db, signal } = options;
  const concurrency = options.concurrency ?? 4;
  const leaseMs = options.leaseMs ?? 60_000;
  const timeoutMs = options.timeoutMs ?? 30_000;
  const maxAttempts = options.maxAttempts ?? 10;
  const pollMs = options.pollMs ?? 5_000;
  const backoff = options.backoff ?? { baseMs: 1_000, capMs: 600_000 };
  const ordered = options.ordered ?? false;
  const log = options.log ?? ((line) => console.log(JSON.stringify(line)));
  if (timeoutMs >= leaseMs) throw new Error(`Dispatcher timeout (${timeoutMs} ms) must be shorter than the lease (${leaseMs} ms)`);

  // A NOTIFY, a finished row or abort wakes the loop; one arriving while it claims is not lost.
  const { nudge, claiming, sleep } = createWakeUp(signal);
  const listener = options.listen === false ? undefined : await db.listen(OUTBOX_CHANNEL, nudge).catch((err) => {
    log({ dispatcher: "listen_failed", error: describeError(err) });
    return undefined;
  });

  const inFlight = new Set<Promise<void>>();
  async function work(message: OutboxMessage): Promise<void> {
    const started = Date.now();
    const line = {
      outbox_id: message.id, message_id: message.messageId, type: message.eventType,
      aggregate: `${message.aggregateType}/${message.aggregateId}`, attempt: message.attempt, token: message.token.toString(),
    };
    try {
      const result = await deliverClaimed(db, message, { send: options.send, timeoutMs, maxAttempts, backoff });
      log({ ...line, outcome: result.outcome, ...(result.error ? { error: result.error } : {}), duration_ms: Date.now() - started });
    } catch (err) {
      // Settling the row failed (database unreachable): the lease expires and the row is delivered again.
      log({ ...line, outcome: "unsettled", error: describeError(err), duration_ms: Date.now() - started });
    }
  }

  while (!signal.aborted) {
    const free = concurrency - inFlight.size;
    if (free === 0) {
      // Every slot is busy: wait for one to finish (sleep() would return at once on a pending NOTIFY).
      await Promise.race(inFlight);
      continue;
    }
    claiming();
    let messages: OutboxMessage[];
    try {
      messages = await claimOutboxBatch(db, { limit: free, leaseMs, maxAttempts, ordered });
    } catch (err) {
      log({ dispatcher: "claim_failed", error: describeError(err) });
      await sleep(Math.min(pollMs, 1_000));
      continue;
    }
    for (const message of messages) {
      const p: Promise<void> = work(message).finally(() => {
        inFlight.delete(p);
        nudge();
      });
      inFlight.add(p);
    }
    // Invariant: claim again at once only when the batch filled every free slot (more may be due).
    if (messages.length === free) continue;
    await sleep(pollMs);
  }
  await Promise.all(inFlight);
  await listener?.unlisten().catch(() => {});
}
