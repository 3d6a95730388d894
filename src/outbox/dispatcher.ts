import { OUTBOX_CHANNEL } from "../inbox/notifier.ts";
import type { Telemetry } from "../telemetry.ts";
import { resolveLoopOptions, type LoopOptions } from "../loop/loop-options.ts";
import { describeError } from "../errors.ts";
import { runClaimLoop } from "../loop/claim-loop.ts";
import { settleWithin, STUCK_SLACK_MS } from "../db/db.ts";
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
 * The outbox dispatcher loop, the inbox worker's ({@link runClaimLoop} on {@link OUTBOX_CHANNEL}): claims
 * due rows up to the free slots (each claim a new fencing token) and delivers each with {@link deliverClaimed}.
 * Logs one line per delivery: outbox id, message id, type, aggregate, attempt, token, outcome, duration
 * ms (never the payload); a `stale` outcome means a mark or failure record was refused because the
 * lease had expired and another dispatcher owned the row. Resolves after `signal` aborts and in-flight
 * deliveries finished (each bounded by `timeoutMs`); database errors never end it.
 * @throws Error when `timeoutMs >= leaseMs` (a delivery could outlive its lease while still running).
 */
export async function runDispatcher(options: DispatcherOptions): Promise<void> {
  const ordered = options.ordered ?? false;
  const resolved = resolveLoopOptions(options, "Dispatcher");
  const { db, leaseMs, timeoutMs, maxAttempts, backoff, log } = resolved;
  // Resolves true: a settled message can make the next of its aggregate due (ordered), so the loop claims again.
  async function work(message: OutboxMessage): Promise<boolean> {
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
        deliverClaimed(db, message, { ...options, timeoutMs, maxAttempts, backoff }), // send, telemetry
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
    return true;
  }
  await runClaimLoop({
    ...resolved,
    label: "dispatcher",
    channel: OUTBOX_CHANNEL,
    claim: async (free) => {
      const units = await settleWithin(
        claimOutboxBatch(db, { limit: free, leaseMs, maxAttempts, ordered }),
        timeoutMs + STUCK_SLACK_MS,
        "The dispatcher's claim",
      );
      return { units, more: units.length === free };
    },
    work,
  });
}
