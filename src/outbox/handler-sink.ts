import { PermanentError } from "../errors.ts";
import type { SendFn } from "./deliver-claimed.ts";

/**
 * Outbox event type → the code that performs its side effect (a mail, a call back to Stripe through
 * `writeBackOnce`, …). Each runs outside any database transaction, at least once per message: it must
 * be idempotent on its own (a deterministic idempotency key, a dedup record) and honour `signal`.
 */
export type OutboxHandlerTable = Readonly<Record<string, SendFn>>;

/**
 * A {@link SendFn} that dispatches by `eventType` to handlers registered in code. A type without a
 * handler is a {@link PermanentError}: the row is parked as needs-review at once (deploy the handler,
 * then requeue it), rather than retried until the attempt limit.
 */
export function handlerSink(handlers: OutboxHandlerTable): SendFn {
  return async (message, context) => {
    const handler = handlers[message.eventType];
    if (!handler) throw new PermanentError(`No outbox handler for ${message.eventType}`);
    await handler(message, context);
  };
}
