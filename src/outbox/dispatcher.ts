import { OUTBOX_CHANNEL } from "../inbox/notifier.ts";
import type { Telemetry } from "../telemetry.ts";
import { resolveLoopOptions, type LoopOptions } from "../loop/loop-options.ts";
import { describeError } from "../errors.ts";
import { settleWithin, STUCK_SLACK_MS } from "../db/db.ts";
import { createWakeUp } from "../loop/wake-up.ts";
import { claimOutboxBatch, type OutboxMessage } from "./claim.ts";
import { deliverClaimed, type SendFn } from "./deliver-claimed.ts";

/** LISTEN/NOTIFY channel that wakes dispatchers: sent after a processed event's commit (src/inbox/notifier.ts). */
export { OUTBOX_CHANNEL };

/** Settings of {@link runDispatcher}; times in ms. */
export interface DispatcherOptions extends LoopOptions {
  /** Where messages go: `httpSink(…)`, `handlerSink(…)` or any {@link SendFn}. */
  send: SendFn;
  /**
   * Deliver each aggregate's rows one at a time in `id` order (see `claimOutboxBatch`). Every
   * dispatcher on the table must agree. A parked row blocks its aggregate until it is requeued.
   * Default false.
   */
  ordered?: boolean;
  /** OpenTelemetry: a producer span per send, its traceparent sent to the sink (deliver-claimed.ts). Default: none. */
  telemetry?: Telemetry;
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
  const ordered = options.ordered ?? false;
  const { db, signal, concurrency, leaseMs, timeoutMs, maxAttempts, pollMs, backoff, listen, log } = resolveLoopOptions(
    options,
    "Dispatcher",
  );

  // A NOTIFY, a finished row or abort wakes the loop; one arriving while it claims is not lost.
  const { nudge, claiming, sleep } = createWakeUp(signal);
  const listener = !listen
    ? undefined
    : await db.listen(OUTBOX_CHANNEL, nudge).catch((err) => {
        log({ dispatcher: "listen_failed", error: describeError(err) });
        return undefined;
      });

  const inFlight = new Set<Promise<void>>();
  async function work(message: OutboxMessage): Promise<void> {
    const started = Date.now();
    const line = {
      outbox_id: message.id,
      message_id: message.messageId,
      type: message.eventType,
      aggregate: `${message.aggregateType}/${message.aggregateId}`,
      attempt: message.attempt,
      token: message.token.toString(),
    };
    try {
      const result = await settleWithin(
        deliverClaimed(db, message, { send: options.send, timeoutMs, maxAttempts, backoff, telemetry: options.telemetry }),
        2 * timeoutMs + STUCK_SLACK_MS, // the send's own bound, then the statement settling the row
        "Settling the outbox message",
      );
      log({
        ...line,
        outcome: result.outcome,
        ...(result.error ? { error: result.error } : {}),
        duration_ms: Date.now() - started,
        level: result.outcome === "needs_review" ? "error" : result.outcome === "published" ? "info" : "warn",
        message: `dispatch ${result.outcome}`,
      });
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
      messages = await settleWithin(
        claimOutboxBatch(db, { limit: free, leaseMs, maxAttempts, ordered }),
        timeoutMs + STUCK_SLACK_MS,
        "The dispatcher's claim",
      );
    } catch (err) {
      log({ dispatcher: "claim_failed", error: describeError(err), level: "warn" });
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
