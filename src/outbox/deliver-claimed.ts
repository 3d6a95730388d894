import type { Db } from "../db/db.ts";
import { within } from "../db/sleep.ts";
import { inSpan, spanContextOf, traceparentOf, type Telemetry } from "../telemetry.ts";
import type { Backoff } from "../inbox/inbox.ts";
import { describeError, PermanentError } from "../errors.ts";
import type { OutboxMessage } from "./claim.ts";

/**
 * Delivers one message to a sink: an HTTP POST (`httpSink()`), handlers registered in code
 * (`handlerSink()`), a test double. Resolves when the sink has the message (HTTP: a 2xx); throws
 * otherwise, a {@link PermanentError} when no retry can help. `signal` aborts at the send timeout
 * (and the dispatcher stops waiting then): a send must honour it. Deliveries are at least once: the
 * same message (same `messageId`) can arrive again after a timeout or an expired lease.
 */
export type SendFn = (message: OutboxMessage, context: { signal: AbortSignal }) => Promise<void>;

/**
 * What one delivery came to. `stale`: this claim's token is no longer the row's (its lease expired
 * and another dispatcher claimed the row), so nothing was written.
 */
export type DeliveryOutcome = "published" | "failed" | "needs_review" | "stale";

/** Options of {@link deliverClaimed}. */
export interface DeliverOptions {
  send: SendFn;
  /** How long to wait for `send`, ms; must be shorter than the lease. */
  timeoutMs: number;
  maxAttempts: number;
  backoff: Backoff;
  /**
   * OpenTelemetry: the send runs in a `send <event type>` producer span, a child of the row's stored
   * traceparent (the transaction that wrote it), and the sink receives that span's traceparent.
   */
  telemetry?: Telemetry;
}

/** The send did not settle within its timeout. */
export class DeliveryTimeoutError extends Error {
  constructor(timeoutMs: number) {
    super(`Sink did not answer within ${timeoutMs} ms`);
    this.name = "DeliveryTimeoutError";
  }
}

/**
 * Delivers one claimed message and settles its row (seed §6, end: the dispatcher's lease + fencing):
 * calls `send` with a timeout, then {@link markPublished} with this claim's token; on failure
 * {@link recordDeliveryFailure}. No transaction is open while the sink is called. Returns the outcome
 * and the error text on failure; never throws for sink errors. A failure to reach the database is
 * thrown (the lease then expires and the row is claimed again: delivered twice, same message id).
 */
export async function deliverClaimed(
  db: Db,
  message: OutboxMessage,
  options: DeliverOptions,
): Promise<{ outcome: DeliveryOutcome; error?: string }> {
  try {
    await sendTraced(message, options);
  } catch (err) {
    const error = describeError(err);
    const outcome = await recordDeliveryFailure(db, message, error, err instanceof PermanentError, options);
    return { outcome, error };
  }
  return { outcome: (await markPublished(db, message.id, message.token)) ? "published" : "stale" };
}

/** {@link sendWithTimeout} inside the send span when tracing is on (see DeliverOptions.telemetry). */
function sendTraced(message: OutboxMessage, options: DeliverOptions): Promise<void> {
  const t = options.telemetry;
  if (!t) return sendWithTimeout(message, options.send, options.timeoutMs);
  const stored = spanContextOf(message.traceparent);
  const spec = {
    name: `send ${message.eventType}`,
    kind: t.api.SpanKind.PRODUCER,
    parent: stored ? t.api.trace.setSpanContext(t.api.ROOT_CONTEXT, stored) : undefined,
    attributes: {
      "messaging.system": "webhook-inbox-outbox",
      "messaging.operation.type": "send",
      "messaging.operation.name": "send",
      "messaging.message.id": message.messageId,
      "webhook_inbox.attempt": message.attempt,
    },
  };
  return inSpan(t, spec, (span) => {
    const traceparent = traceparentOf(t, span) ?? message.traceparent;
    return sendWithTimeout(traceparent ? { ...message, traceparent } : message, options.send, options.timeoutMs);
  });
}

async function sendWithTimeout(message: OutboxMessage, send: SendFn, timeoutMs: number): Promise<void> {
  const controller = new AbortController();
  const late = () => {
    const err = new DeliveryTimeoutError(timeoutMs);
    controller.abort(err);
    return err;
  };
  return within(send(message, { signal: controller.signal }), timeoutMs, late);
}

/**
 * Marks a delivered row published, only while it still carries `token` (the fencing token of the
 * claim that delivered it) and is unpublished. Returns whether it took: false means another
 * dispatcher claimed the row after this claim's lease expired (or already published it), and nothing
 * was changed. Its own statement, outside any transaction.
 */
export async function markPublished(db: Db, id: string, token: bigint): Promise<boolean> {
  const rows = await db`
    update outbox
       set published_at = now(),
           last_error = null
     where id = ${id}::bigint
       and claim_token = ${token.toString()}::bigint
       and published_at is null
    returning 1
  `;
  return rows.length === 1;
}

/**
 * Records a failed delivery: `last_error`, `available_at` pushed out by the jittered SQL backoff
 * (`webhook_inbox_backoff`, sql/0003_worker.sql), and needs-review when the error is permanent or the
 * attempt limit is reached. Fenced like {@link markPublished}: touches the row only while it is
 * unpublished and still carries this claim's token, so a stale dispatcher never pushes back the new
 * owner's lease. Returns `needs_review`, `failed`, or `stale` when the token no longer matched.
 */
export async function recordDeliveryFailure(
  db: Db,
  message: Pick<OutboxMessage, "id" | "token">,
  error: string,
  permanent: boolean,
  options: Pick<DeliverOptions, "maxAttempts" | "backoff">,
): Promise<Exclude<DeliveryOutcome, "published">> {
  const [row] = await db<{ parked: boolean }[]>`
    update outbox
       set last_error = ${error},
           available_at = now() + webhook_inbox_backoff(attempts, ${options.backoff.baseMs}, ${options.backoff.capMs}),
           needs_review_at = case when ${permanent} or attempts >= ${options.maxAttempts} then now() end
     where id = ${message.id}::bigint
       and claim_token = ${message.token.toString()}::bigint
       and published_at is null
    returning needs_review_at is not null as parked
  `;
  if (!row) return "stale";
  return row.parked ? "needs_review" : "failed";
}
